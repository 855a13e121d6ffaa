#!/usr/bin/env bash
# The reward suite's hostile tests again as an ordinary user (nobody, 65534), where a root run
# (CI) can drop to one: the code sandbox and the reward workers must hold without root's
# mechanisms (the workers' PID namespace then comes with a user namespace). Exit 77 (skipped) when
# this machine cannot run them unprivileged, naming why.
#   tests/reward/unprivileged.sh BUILD_DIR
set -euo pipefail
build=$1
if [[ $(id -u) != 0 ]]; then
  echo "unprivileged.sh: already running as uid $(id -u): the suite itself covers this case"; exit 77
fi
command -v setpriv >/dev/null || { echo "unprivileged.sh: no setpriv (util-linux) to drop to nobody"; exit 77; }
python=/usr/bin/python3
[[ -x $python ]] || { echo "unprivileged.sh: no $python that nobody can run"; exit 77; }
if ! setpriv --reuid=65534 --regid=65534 --clear-groups test -x "$build/tests/test_reward"; then
  echo "unprivileged.sh: nobody cannot reach $build/tests/test_reward (a folder on its path is private)"; exit 77
fi
cd /tmp
exec env UNSTUCK_TEST_PYTHON=$python setpriv --reuid=65534 --regid=65534 --clear-groups \
  "$build/tests/test_reward" --gtest_filter='WorkerPool*:CodeVerifierHostile*:CodeSandbox*:CodeVerifier.*'
