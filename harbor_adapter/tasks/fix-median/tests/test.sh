#!/bin/bash
# Reward 1 when the hidden checks and the visible tests pass, else 0.
cd /app
if python3 /tests/test_hidden.py && python3 /app/test_stats.py; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
