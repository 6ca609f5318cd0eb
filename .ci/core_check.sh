#!/usr/bin/env bash
# The lean core: install `pip install .` (no extra) in a fresh venv and run the tests marked `core`
# against that install, so a heavy import that slips into the core (torch, numpy, llama.cpp,
# fastapi, ...) fails here even though the full suite, with every extra installed, passes.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
started=$SECONDS

work=$(mktemp -d "${TMPDIR:-/tmp}/rein-core.XXXXXX")
trap 'rm -rf "$work"' EXIT
python=${PYTHON:-python3}
"$python" -m venv "$work/venv"
bin=$work/venv/bin

# Build from a copy of the tree (tracked and new files), so setuptools' build/ and egg-info never
# land in the checkout and nothing there can leak into the wheel.
mkdir "$work/src"
git ls-files -z --cached --others --exclude-standard | xargs -0 cp --parents -t "$work/src" 2>/dev/null \
  || { echo "core check: not a git checkout; copying the tree" >&2; cp -r . "$work/src"; }
"$bin/python" -m pip install --quiet "$work/src" pytest pytest-asyncio pytest-timeout

# Nothing heavy may have come in with the core's own dependencies.
"$bin/python" - <<'EOF'
import importlib.util
heavy = ["torch", "torch_geometric", "chromadb", "llama_cpp", "numpy", "scipy", "PIL", "skimage",
         "networkx", "fastapi", "uvicorn", "sentence_transformers", "mcp", "ray", "psycopg"]
present = [m for m in heavy if importlib.util.find_spec(m) is not None]
if present:
    raise SystemExit(f"core check: the core install pulled in {present}")
EOF

# The installed package, not the checkout: pytest runs by its script from the repository root,
# where tests/conftest.py and pyproject.toml (markers) are found but `agent` is not on sys.path.
# Only the files that hold core tests: collecting the others would import their extras.
mapfile -t files < <(grep -rlE 'pytest\.mark\.core\b' tests --include='test_*.py' | sort)
# (pytest's summary stays the last line: CI reads it.)
echo "core check: core installed in $((SECONDS - started)) s; running the core tests of ${#files[@]} files"
"$bin/pytest" -q -p no:cacheprovider -m "core and not slow" "${files[@]}"
