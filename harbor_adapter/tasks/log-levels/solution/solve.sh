#!/bin/bash
set -euo pipefail
cat /app/logs/*.log | awk '$2 == "INFO" || $2 == "WARN" || $2 == "ERROR" {print $2}' \
  | sort | uniq -c | sort -k1,1nr | awk '{print $2, $1}' > /app/levels.txt
cat /app/levels.txt
