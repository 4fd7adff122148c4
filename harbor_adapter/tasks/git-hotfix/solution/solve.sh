#!/bin/bash
set -euo pipefail
cd /app/repo
fix=$(git log main --format=%H --grep='^fix: correct the greeting$')
git checkout -q -b hotfix v1.0
git cherry-pick "$fix"
git checkout -q main
git log --oneline --all --graph
