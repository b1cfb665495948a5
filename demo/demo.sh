#!/bin/sh
# The README's demo, run inside `gangctl start --mesh 4x4 -- sh demo/demo.sh`:
# a few jobs of different shapes share the 4x4 mesh; gangctl shows where they landed.
set -e
say() { printf '\n\033[1m== %s\033[0m\n' "$*"; }

say "prun -n 4x4 --label: 16 ranks, each on its own node"
prun -n 4x4 --label -- sh -c 'echo "rank $GANG_RANK of $GANG_SIZE on node $GANG_NODE"' | sort -n

say "exit codes come back: prun -n 2x2 -- sh -c 'exit 7'"
prun -n 2x2 -- sh -c 'exit 7' || echo "prun exited with $?"

say "stdin goes to rank 0: echo hello | prun -n 2x1 --label -- cat"
echo hello | prun -n 2x1 --label -- cat

say "three jobs at once: 2x2, 2x2 and 4x2 (a node count, 8, also works)"
a=$(prun -n 2x2 --detach --name two-by-two -- sleep 30)
b=$(prun -n 2x2 --detach --name another -- sleep 30)
c=$(prun -n 8 --detach --name eight-nodes -- sleep 30)
d=$(prun -n 1 --detach --name waits -- echo "I waited for a free node")
sleep 1
gangctl jobs
say "the slice matrix: which job holds which node"
gangctl slices

say "cancel job $a: the waiting job $d gets its nodes"
gangctl cancel "$a"
sleep 1
gangctl jobs --all
gangctl cancel "$b" "$c" >/dev/null
say "bad input gets a clear error"
prun -n 5x5 -- true || true
prun -n 2x2 -- /no/such/program || true
