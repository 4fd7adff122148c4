# Shared by every step's test.sh (the task's tests/ lie under each step's in /tests).
reward() { echo "$1" > /logs/verifier/reward.txt; }
