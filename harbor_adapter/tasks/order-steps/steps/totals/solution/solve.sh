#!/bin/bash
awk -F, 'NR > 1 { s += $2 } END { printf "%.2f\n", s }' /app/orders.csv > /app/total.txt
