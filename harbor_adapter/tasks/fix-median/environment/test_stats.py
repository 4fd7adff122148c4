from stats import mean, median

assert mean([1, 2, 3]) == 2
assert median([3, 1, 2]) == 2
assert median([5]) == 5
print("ok")
