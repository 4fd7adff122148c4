#!/bin/bash
# Reward 1 when /app/hello.txt holds exactly "hello, harbor" and a newline, else 0.
if [ "$(cat /app/hello.txt 2>/dev/null)" = "hello, harbor" ] && [ "$(wc -l < /app/hello.txt)" = "1" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
