#!/bin/bash
# Builds the task's repository (run once, at image build time).
set -euo pipefail
export GIT_AUTHOR_NAME=dev GIT_AUTHOR_EMAIL=dev@example.com GIT_COMMITTER_NAME=dev GIT_COMMITTER_EMAIL=dev@example.com
export GIT_AUTHOR_DATE="2024-01-01T00:00:00Z" GIT_COMMITTER_DATE="2024-01-01T00:00:00Z"
git init -q -b main /app/repo
cd /app/repo
printf 'def greet(name):\n    return "Helo, " + name\n' > greet.py
printf '# greeter\n' > README.md
git add . && git commit -qm "initial greeter"
printf 'VERSION = "1.0"\n' > version.py
git add . && git commit -qm "release 1.0"
git tag v1.0
printf '# greeter\n\nSays hello.\n' > README.md
git commit -qam "docs: describe the greeter"
printf 'def greet(name):\n    return "Hello, " + name\n' > greet.py
git commit -qam "fix: correct the greeting"
printf 'VERSION = "2.0-dev"\n' > version.py
git commit -qam "start 2.0"
git config --global user.name agent
git config --global user.email agent@example.com
git config --global --add safe.directory /app/repo
