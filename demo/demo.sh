#!/bin/sh
# The README's demo, run inside `gangctl start --mesh 4x4 -- sh demo/demo.sh`:
# jobs share the 4x4 mesh in space and in time; gangctl shows where they landed, which
# slice runs now, and how closely the agents switched.
set -e
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }
# Wait (up to 30 s) until `gangctl job ID` matches a pattern: the demo shows states the
# scheduler reaches, not states a sleep hoped for.
wait_for() {
    n=0
    until gangctl job "$1" | grep -q "$2"; do
        n=$((n + 1))
        if [ "$n" -gt 300 ]; then
            echo "demo: job $1 never matched '$2'" >&2
            gangctl job "$1" >&2
            exit 1
        fi
        sleep 0.1
    done
}

say "prun -n 4x4 --label: 16 ranks, each on its own node"
prun -n 4x4 --label -- sh -c 'echo "rank $GANG_RANK of $GANG_SIZE on node $GANG_NODE"' | sort -n

say "exit codes come back: prun -n 2x2 -- sh -c 'exit 7'"
prun -n 2x2 -- sh -c 'exit 7' || echo "prun exited with $?"

say "stdin goes to rank 0: echo hello | prun -n 2x1 --label -- cat"
echo hello | prun -n 2x1 --label -- cat

say "time sharing: two CPU-bound 4x4 jobs take turns on the whole mesh (50 ms slots)"
spin='awk "BEGIN{for(i=0;i<4000000;i++)s+=i}"'
prun -n 4x4 --name spin-a -- sh -c "$spin" &
prun -n 4x4 --name spin-b --gang priority -- sh -c "$spin" &
sleep 1
gangctl slices
say "gangctl jobs: RUN counts the time a job was scheduled, not the time it was stopped"
gangctl jobs
wait
sleep 1.2   # a boundary's skew is counted once every agent's report is in (1 s)
say "gangctl stats: how closely the 16 agents switched (skew), and what a switch costs"
gangctl stats

say "jobs of shapes 2x2, 2x2 and 8 nodes share the mesh in space (and a 4x4 one in time)"
a=$(prun -n 2x2 --detach --name two-by-two -- sleep 30)
b=$(prun -n 2x2 --detach --name another -- sleep 30)
c=$(prun -n 8 --detach --name eight-nodes -- sleep 30)
d=$(prun -n 4x4 --detach --name whole-mesh -- sleep 30)
sleep 1
gangctl jobs
say "the slice matrix: which job holds which node in which slice"
gangctl slices

say "the mesh is full in every slice (MPL 4): the next job waits, and says why"
e=$(prun -n 4x4 --detach --name fill-2 -- sleep 30)
f=$(prun -n 4x4 --detach --name fill-3 -- sleep 30)
g=$(prun -n 4x4 --detach --name queued -- sleep 30)
h=$(prun -n 1 --detach --name behind-it -- sleep 30)
wait_for "$h" 'pending: *priority'
gangctl jobs
say "gangctl cancel $d: the queued job $g starts in its place"
gangctl cancel "$d"
wait_for "$g" 'state: *running'
gangctl jobs "$d,$g"
gangctl slices
gangctl cancel "$a" "$b" "$c" "$e" "$f" "$g" "$h" >/dev/null

say "a drained node: a job that needs it waits for it, and the others go around it"
gangctl drain 0-3,3
i=$(prun -n 4x4 --detach --name needs-all -- sleep 30)
wait_for "$i" 'pending: *waiting for node'
gangctl jobs "$i"
gangctl resume 0-3,3
wait_for "$i" 'state: *running'
gangctl cancel "$i" >/dev/null

say "time limits as Slurm takes them (-t 0:01 is one second); the job ends as timeout"
prun -n 2x2 -t 0:01 -- sleep 30 || echo "prun exited with $?"
gangctl jobs last

say "a node count is rounded up to a rectangle, and prun says so (--exact refuses)"
prun -n 5 -- true
prun -n 5 --exact -- true || true

say "bad input gets a clear error"
prun -n 5x5 -- true || true
prun -n 2x2 -- /no/such/program || true
prun -n 2 -t 1:2:3:4 -- true || true
