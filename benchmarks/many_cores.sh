#!/usr/bin/env bash
# The scaling runs for a machine with many cores, in one go, from the repository's root:
#   bash benchmarks/many_cores.sh OUT_DIR
# 1. bench_cores.py: `stretch replay` as whole processes at parallelism 1, 2, 4, ... up to
#    the cores, against the single-thread programs (issues 18 and 22);
# 2. bench_elastic.py Q5 (the model policy from 1 thread to n = the cores) and Q4
#    (provision and decommission at n and 2n), shortened to fit a few minutes.
# It installs the checkout into the Python it is given ($PYTHON, default python3) without
# fetching anything (the machine may have no network: numpy, numba, pyarrow, sortedcontainers
# and matplotlib must already be there). Each step has a deadline; results and logs are
# packed into OUT_DIR/results.tar after every step, so a step cut short loses only itself.
set -u
out=${1:?usage: many_cores.sh OUT_DIR}
py=${PYTHON:-python3}
results=$(mktemp -d)
export PYTHONUNBUFFERED=1 STRETCH_BENCH_RESULTS=$results

pack() { tar -C "$results" -cf "$out/results.tar" . ; }

{
  "$py" -c 'import sys, numba, numpy, pyarrow; print(sys.version, "numba", numba.__version__,
    "numpy", numpy.__version__, "pyarrow", pyarrow.__version__)'
  nproc
  grep -m1 "model name" /proc/cpuinfo
} 2>&1 | tee "$results/environment.txt"

if ! "$py" -m pip install -q --no-deps --no-build-isolation --no-index -e . >"$results/install.txt" 2>&1; then
  echo "pip install -e . failed (see install.txt); a .pth file and a wrapper instead"
  site=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  echo "$PWD" >"$site/stretch-checkout.pth"
  bin=$(dirname "$("$py" -c 'import sys; print(sys.executable)')")
  printf '#!%s\nimport sys\nfrom stretch.cli import main\nsys.exit(main())\n' "$bin/python" >"$bin/stretch"
  chmod +x "$bin/stretch"
fi
"$py" -c 'import stretch.cli' || exit 1

step() {  # step NAME SECONDS COMMAND...
  local name=$1 seconds=$2
  shift 2
  echo "== $name (deadline ${seconds} s)"
  timeout --signal=INT --kill-after=10 "$seconds" "$@" 2>&1 | tee "$results/log_$name.txt"
  echo "== $name: exit ${PIPESTATUS[0]}"
  pack
}

step cores "${CORES_S:-270}" "$py" benchmarks/bench_cores.py --runs 3
step q5 "${Q5_S:-120}" "$py" benchmarks/bench_elastic.py --experiment q5 --output "$results" \
  --ws-ms 4000 --duration-s 30
step q4 "${Q4_S:-150}" "$py" benchmarks/bench_elastic.py --experiment q4 --output "$results" \
  --ws-ms 4000 --q4-settle-s 1 --q4-after-s 4
