# Sourced by run.sh and precision.sh: sets PYTHON to the interpreter that sees Debian's torch and
# installs python3-torch with apt-get when it is missing (the one place that knows how).
# Debian's torch lives in the system interpreter (a pyenv or venv python3 on PATH would not see it).
PYTHON=/usr/bin/python3
if ! "$PYTHON" -c "import torch" 2>/dev/null; then
    echo "== installing python3-torch (apt-get)" >&2
    if [ "$(id -u)" -eq 0 ]; then
        DEBIAN_FRONTEND=noninteractive apt-get install -y python3-torch >&2
    else
        sudo DEBIAN_FRONTEND=noninteractive apt-get install -y python3-torch >&2
    fi
    "$PYTHON" -c "import torch" || { echo "${0##*/}: python3-torch is still not importable by $PYTHON" >&2; exit 1; }
fi
