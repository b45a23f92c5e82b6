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
#
# STEPS (default "cores q5 q4") picks the steps, RUNS (default 3) bench_cores' rounds,
# WORKLOADS (default all four) bench_cores' workloads, and CORES_S, Q5_S, Q4_S their
# deadlines in seconds. On the lent 16-vCPU machine (cores about
# 2.6x slower than a 2-core development machine's) one round of bench_cores' three
# workloads took about 3 minutes and their warm-ups 4.5 more; Q4 took 100 s, Q5 (30 s of
# input, three runs) 110 s before its run_sn check.
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
# Bytecode for our packages, as ./dev install makes it (with PYTHONDONTWRITEBYTECODE set,
# every replay process would otherwise compile them from source).
"$py" -m compileall -q stretch scalegate controller api >/dev/null

step() {  # step NAME SECONDS COMMAND...
  local name=$1 seconds=$2
  shift 2
  echo "== $name (deadline ${seconds} s)"
  timeout --signal=INT --kill-after=10 "$seconds" "$@" 2>&1 | tee "$results/log_$name.txt"
  echo "== $name: exit ${PIPESTATUS[0]}"
  pack
}

for name in ${STEPS:-cores q5 q4}; do
  case $name in
    cores) step cores "${CORES_S:-1200}" "$py" benchmarks/bench_cores.py --runs "${RUNS:-3}" \
      --workloads ${WORKLOADS:-scalejoin scalejoin_index scalejoin_band forward} ;;
    q5) step q5 "${Q5_S:-240}" "$py" benchmarks/bench_elastic.py --experiment q5 \
      --output "$results" --ws-ms 4000 --duration-s 30 --check-comparisons 2e6 ;;
    q4) step q4 "${Q4_S:-200}" "$py" benchmarks/bench_elastic.py --experiment q4 \
      --output "$results" --ws-ms 4000 --q4-settle-s 1 --q4-after-s 4 ;;
    *) echo "unknown step $name (cores, q5, q4)"; exit 2 ;;
  esac
done
