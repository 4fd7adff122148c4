#!/bin/bash
awk -F, 'NR > 1 { s += $2 } END { printf "%.2f\n", s }' /app/orders.csv > /app/total.txt
awk -F, 'NR > 1 { t[$1] += $2 } END { for (c in t) printf "%s %.2f\n", c, t[c] }' /app/orders.csv \
  | sort > /app/by_customer.txt
