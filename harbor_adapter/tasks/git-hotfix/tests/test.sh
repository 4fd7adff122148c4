#!/bin/bash
# Reward 1 when hotfix = v1.0 + the cherry-picked fix, main is unchanged, checked out and clean.
cd /app/repo || { echo 0 > /logs/verifier/reward.txt; exit 0; }
git config --global --add safe.directory /app/repo
fail() { echo "FAIL: $1"; echo 0 > /logs/verifier/reward.txt; exit 0; }
tag=$(git rev-parse -q --verify 'v1.0^{commit}') || fail "no v1.0"
git rev-parse -q --verify hotfix >/dev/null || fail "no hotfix branch"
[ "$(git rev-parse hotfix^)" = "$tag" ] || fail "hotfix's parent is not v1.0"
[ "$(git log -1 --format=%s hotfix)" = "fix: correct the greeting" ] || fail "wrong commit message on hotfix"
git show hotfix:greet.py | grep -q '"Hello, "' || fail "the fix is not on hotfix"
[ "$(git show hotfix:version.py)" = 'VERSION = "1.0"' ] || fail "hotfix carries later changes"
[ "$(git show hotfix:README.md)" = "# greeter" ] || fail "hotfix carries the docs change"
[ "$(git log -1 --format=%s main)" = "start 2.0" ] || fail "main changed"
[ "$(git rev-list --count main)" = "5" ] || fail "main has a different history"
[ "$(git symbolic-ref --short HEAD)" = "main" ] || fail "main is not checked out"
[ -z "$(git status --porcelain)" ] || fail "the working tree is not clean"
echo 1 > /logs/verifier/reward.txt
