#!/bin/bash
# Runs in a fresh container of the task's image: /app/notes.txt is the image's own, and
# /app/report.txt is the only file carried over from the agent's container.
expected=$'cat 3\nthe 3\na 1\nand 1\nhat 1\nran 1\nsat 1'
if [ -f /app/report.txt ] && [ "$(cat /app/report.txt)" = "$expected" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
