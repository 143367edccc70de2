#!/usr/bin/env bash
# Builds the ctxstore-server wheel: the `ctxstore-server` and `ctxstore` binaries packaged so
# that `pip install` puts both on PATH, no Rust needed (clients/python/server-wheel/).
#
#   clients/python/build-server-wheel.sh OUTDIR [--profile PROFILE | --bin-dir DIR]
#
# --profile: the cargo profile to build them with (default release; CI passes dev, which
#            reuses the debug binaries `cargo test` built: a release build of the workspace
#            costs several minutes on 2 cores).
# --bin-dir: take prebuilt binaries from DIR instead of building.
# Leaves exactly one .whl in OUTDIR (older ctxstore-server wheels there are removed), the
# binaries' debug files beside it (PROGRAM.debug, and PROGRAM.dwp where the build split its
# DWARF), and prints the wheel's path; the wheel's binaries are stripped. Needs pip (to fetch
# the pinned hatchling build backend), objcopy (binutils) and, unless --bin-dir, cargo. PYTHON picks the interpreter (default python3).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
python="${PYTHON:-python3}"

usage() { echo "usage: $0 OUTDIR [--profile PROFILE | --bin-dir DIR]" >&2; exit 2; }
[[ $# -ge 1 ]] || usage
outdir="$1"; shift
profile="release"
bin_dir=""
while [[ $# -gt 0 ]]; do
    case "$1" in
        --profile) [[ $# -ge 2 ]] || usage; profile="$2"; shift 2 ;;
        --bin-dir) [[ $# -ge 2 ]] || usage; bin_dir="$2"; shift 2 ;;
        *) usage ;;
    esac
done

if [[ -z "$bin_dir" ]]; then
    echo "== cargo build --profile $profile -p ctxstore-server -p ctxstore-cli" >&2
    (cd "$repo" && cargo build --profile "$profile" -p ctxstore-server -p ctxstore-cli \
        --bin ctxstore-server --bin ctxstore >&2)
    target="${CARGO_TARGET_DIR:-$repo/target}"
    # cargo names the dev profile's directory "debug".
    [[ "$profile" == "dev" || "$profile" == "test" ]] && bin_dir="$target/debug" \
        || bin_dir="$target/$profile"
fi
bin_dir="$(cd "$bin_dir" && pwd)"
for program in ctxstore-server ctxstore; do
    [[ -x "$bin_dir/$program" ]] || { echo "no executable $bin_dir/$program" >&2; exit 1; }
done

# The wheel's version is the workspace's (Cargo.toml [workspace.package] version).
version="$(sed -n '/^\[workspace.package\]/,/^\[/s/^version *= *"\(.*\)"/\1/p' "$repo/Cargo.toml")"
[[ -n "$version" ]] || { echo "no [workspace.package] version in $repo/Cargo.toml" >&2; exit 1; }

mkdir -p "$outdir"
outdir="$(cd "$outdir" && pwd)"
rm -f "$outdir"/ctxstore_server-*.whl
# Build from a copy: hatchling writes nothing into the source tree then.
stage="$(mktemp -d "${TMPDIR:-/tmp}/ctxstore-server-wheel.XXXXXX")"
trap 'rm -rf "$stage"' EXIT
cp -r "$here/server-wheel/." "$stage/"

# The wheel ships stripped binaries (issue 44: their debug info was most of the wheel). What a
# debugger or a crash report needs stays beside the wheel in OUTDIR: PROGRAM.debug (the
# binary's own DWARF and symbols, found through its .gnu_debuglink) and PROGRAM.dwp (the split
# DWARF the release profile packs beside the binary), for the same build. target/ is never
# touched: the copies are stripped.
command -v objcopy >/dev/null || { echo "objcopy (binutils) is needed to strip the binaries" >&2; exit 1; }
stripped="$stage/bin"
mkdir -p "$stripped"
for program in ctxstore-server ctxstore; do
    cp "$bin_dir/$program" "$stripped/$program"
    objcopy --only-keep-debug "$stripped/$program" "$outdir/$program.debug"
    objcopy --strip-all --add-gnu-debuglink="$outdir/$program.debug" "$stripped/$program"
    if [[ -f "$bin_dir/$program.dwp" ]]; then
        cp "$bin_dir/$program.dwp" "$outdir/$program.dwp"
    else
        rm -f "$outdir/$program.dwp"
    fi
    echo "== $program: $(stat -c %s "$bin_dir/$program") bytes built, $(stat -c %s "$stripped/$program") in the wheel; symbols in $outdir/$program.debug" >&2
done

echo "== building the wheel (version $version, binaries from $bin_dir, stripped)" >&2
CTXSTORE_WHEEL_BIN_DIR="$stripped" CTXSTORE_WHEEL_VERSION="$version" \
    "$python" -m pip wheel --quiet --disable-pip-version-check --no-deps \
    --wheel-dir "$outdir" "$stage" >&2
wheels=("$outdir"/ctxstore_server-*.whl)
[[ ${#wheels[@]} -eq 1 && -f "${wheels[0]}" ]] || { echo "expected one wheel in $outdir" >&2; exit 1; }
echo "== $(basename "${wheels[0]}"): $(stat -c %s "${wheels[0]}") bytes" >&2
echo "${wheels[0]}"
