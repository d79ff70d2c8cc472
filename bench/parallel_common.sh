# Sourced by bench/{dp,tp,pp}_throughput.sh: their shared arguments, defaults and header.
#   source bench/parallel_common.sh DEFAULT_WORK_DIR [TRAINC [TRAINRUN [WORK_DIR]]]
# Sets ROOT, TRAINC, TRAINRUN, WORK (emptied), PRESET (llama-10m), SEQ (128), MBS (2), GBS (8),
# ITERS (12), LOG_INTERVAL (4), CORES (nproc), each overridable from the environment, and prints
# the machine (CPUs, model name, load average) and the model line.
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
TRAINC=${2:-$ROOT/build/tools/trainc}
TRAINRUN=${3:-$ROOT/build/tools/trainrun}
WORK=${4:-$1}
PRESET=${PRESET:-llama-10m}
SEQ=${SEQ:-128}
MBS=${MBS:-2}
GBS=${GBS:-8}
ITERS=${ITERS:-12}
LOG_INTERVAL=${LOG_INTERVAL:-4}
CORES=$(nproc)

rm -rf "$WORK"
mkdir -p "$WORK"
echo "machine: $CORES CPUs ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)); load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "model: $PRESET, seq $SEQ, micro batch $MBS, global batch $GBS${MODEL_NOTE:-}"
