#!/bin/bash
# Runs in a fresh container of the task's image: /app/report.md is all it sees of the agent's.
source /tests/lib.sh
if [ "$(cat /app/report.md 2>/dev/null)" = $'Total: 54.00\nTop customer: cy' ]; then reward 1; else reward 0; fi
