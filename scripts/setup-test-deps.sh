#!/bin/sh
# Install the Debian packages the test suite needs, where they are missing. Idempotent:
# a package already installed is left alone, and nothing is fetched when all are there.
# Run as root (CI runs it from .ci/run; by hand: sudo sh scripts/setup-test-deps.sh).
set -eu

# One package a line, with the test that needs it. Keep this list the only place that
# names test dependencies.
PACKAGES="
systemd
passwd
iproute2
procps
man-db
mpich
libmpich-dev
libpmi2-0-dev
openmpi-bin
libopenmpi-dev
libpmix-dev
pkg-config
hpcc
python3
python3-venv
curl
chromium
chromium-driver
etcd-server
munge
slurm-client
python3-mpi4py
"
# systemd: systemd-analyze (verify, security) on deploy/*.service and systemd-sysusers on
#   deploy/gang.sysusers (crates/gang-master/tests/deploy.rs); and PID 1 of every
#   emulated host, which runs deploy/'s units (crates/gang-e2e/tests/hosts). Installing
#   it starts nothing in a container.
# passwd: useradd, userdel, groupadd, groupdel for real throwaway users
#   (crates/gang-e2e/tests/trust).
# iproute2: ip netns and veth pairs, an agent cut off from the master
#   (crates/gang-e2e/tests/trust); the emulated hosts' bridge, links and tc netem, ss
#   (crates/gang-local/src/hosts, crates/gang-e2e/tests/hosts).
# procps: pgrep, the ranks left on an emulated host (crates/gang-e2e/tests/hosts).
# man-db: man, finding the pages `gangctl install` wrote (crates/gang-cli/tests/installed_docs.rs).
# mpich, libmpich-dev: MPICH and mpicc.mpich, MPI programs built by the test and run
#   under prun through the agent's PMI-1 server (crates/gang-e2e/tests/mpi/mpich.rs), and
#   read by the agent's --mpi auto (crates/gang-agent/src/mpi_program.rs).
# libpmi2-0-dev: Slurm's PMI-2 client library, a client of the agent's PMI-2 wire that
#   nobody here wrote (Debian's MPICH speaks PMI-1 only) (crates/gang-e2e/tests/mpi/pmi2.rs).
# openmpi-bin, libopenmpi-dev: Open MPI 4.1 and mpicc.openmpi, programs built by the test
#   and run under prun --mpi pmix and auto (crates/gang-e2e/tests/mpi/openmpi.rs), and
#   read by the agent's --mpi auto (crates/gang-agent/src/mpi_program.rs).
# libpmix-dev: the OpenPMIx server library the agent links for --mpi pmix
#   (crates/gang-pmix; found with pkg-config at build time, the agent builds without it).
# pkg-config: how crates/gang-pmix/build.rs finds libpmix-dev (the agent's build reruns
#   when packages are installed: it watches /var/lib/dpkg/status).
# hpcc: HPC Challenge (linked with Open MPI) run under prun --mpi pmix
#   (crates/gang-e2e/tests/mpi/openmpi.rs, benches/benches/mpi/hpcc.rs).
# python3, python3-venv: a venv with grpcio from PyPI (scripts/setup-python-api-test.sh) for
#   the README's Python API examples (crates/gang-e2e/tests/python_api.rs).
# curl: gRPC-Web and CORS preflights spoken as a browser's fetch does
#   (crates/gang-e2e/tests/web.rs), and WebDriver calls (crates/gang-e2e/tests/portal.rs).
# chromium, chromium-driver: the reference portal in a headless browser
#   (crates/gang-e2e/tests/portal.rs).
# etcd-server: a real 3-member etcd cluster on loopback for the master's replicated state
#   and its election (crates/gang-e2e/tests/etcd). Installing it starts nothing here (no
#   init); the tests start their own members.
# munge: MUNGE, as every Slurm site runs it; munged is started below. The MPI tests run
#   with it (a PMIx client offered `munge` picks it first) and without it (hidden from one
#   cluster's agents) (crates/gang-e2e/tests/mpi/munge.rs).
# python3-mpi4py: mpi4py (built with Open MPI) under prun, with munged and without
#   (crates/gang-e2e/tests/mpi/munge.rs).
# slurm-client: Slurm's srun, sbatch, squeue on PATH beside prun, as at a site: nothing of
#   ours may take them for its own.

# munged, started as Debian's unit starts it (no init runs it here), unless it answers.
start_munged() {
    if munge -n >/dev/null 2>&1; then
        return 0
    fi
    if [ "$(id -u)" -ne 0 ]; then
        echo "setup-test-deps: munged is not running; run this script as root" >&2
        exit 1
    fi
    if [ ! -s /etc/munge/munge.key ]; then
        mungekey --create --keyfile=/etc/munge/munge.key
    fi
    chown munge:munge /etc/munge/munge.key
    chmod 0400 /etc/munge/munge.key
    install -d -o munge -g munge -m 0755 /run/munge
    runuser -u munge -- /usr/sbin/munged
    if ! munge -n | unmunge >/dev/null; then
        echo "setup-test-deps: munged started but does not answer" >&2
        exit 1
    fi
    echo "setup-test-deps: munged started"
}

missing=""
for p in $PACKAGES; do
    if ! dpkg -s "$p" >/dev/null 2>&1; then
        missing="$missing $p"
    fi
done
if [ -z "$missing" ]; then
    echo "setup-test-deps: all installed:" $PACKAGES
    start_munged
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "setup-test-deps: missing:$missing; run this script as root" >&2
    exit 1
fi
echo "setup-test-deps: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get update -q
# shellcheck disable=SC2086 # one word per package
apt-get install -y -q --no-install-recommends $missing
start_munged
