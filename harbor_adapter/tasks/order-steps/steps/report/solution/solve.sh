#!/bin/bash
top=$(sort -k2 -n -r /app/by_customer.txt | head -n1 | cut -d' ' -f1)
printf 'Total: %s\nTop customer: %s\n' "$(cat /app/total.txt)" "$top" > /app/report.md
