# The emulated host's start-up file for bash: `npu-migrate run --emulate` names it in BASH_ENV,
# so every bash the run starts reads it first. It keeps what a launch script may undo:
# - npu-smi answers by its name whatever PATH the script sets (a real host's sits at a fixed
#   place, /usr/local/sbin; the emulated one's is in the package, bin/npu-smi);
# - a script that sets PYTHONPATH outright (`export PYTHONPATH=/some/dir`) keeps the stand-in
#   torch_npu first: before each command (the DEBUG trap, into functions with functrace) the
#   stand-in's folder is put back first where it is missing, silently even under `set -x`.
# The BASH_ENV the run started with, if any, is read after it.

npu-smi() { "${BASH_SOURCE[0]%/*}/bin/npu-smi" "$@"; }

__npu_migrate_stand_in_first() {
    local site="${BASH_SOURCE[0]%/*}/site"
    [[ ":${PYTHONPATH-}:" == *":$site:"* ]] || export PYTHONPATH="$site${PYTHONPATH:+:$PYTHONPATH}"
}

set -o functrace
# "$_" is handed through: bash sets it to the trap's last argument, so it reads as the script left it
# (`mkdir -p "$dir" && cd "$_"`).
trap '{ __npu_migrate_stand_in_first "$_"; } 2>/dev/null' DEBUG

if [[ -n "${NPU_MIGRATE_BASH_ENV-}" ]]; then
    . "$NPU_MIGRATE_BASH_ENV"
fi
