#!/bin/bash
set -euo pipefail
tr -cs 'A-Za-z' '\n' < /app/notes.txt | tr 'A-Z' 'a-z' | grep -v '^$' | sort | uniq -c \
  | awk '{print $2, $1}' | sort -k2,2nr -k1,1 > /app/report.txt
