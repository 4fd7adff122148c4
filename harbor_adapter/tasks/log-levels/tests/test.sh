#!/bin/bash
# Reward 1 when /app/levels.txt lists the three level counts, largest first; else 0.
expected=$'INFO 72\nWARN 30\nERROR 18'
actual="$(sed -e 's/[[:space:]]*$//' /app/levels.txt 2>/dev/null | sed -e '/^$/d')"
if [ "$actual" = "$expected" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  printf 'expected:\n%s\ngot:\n%s\n' "$expected" "$actual"
  echo 0 > /logs/verifier/reward.txt
fi
