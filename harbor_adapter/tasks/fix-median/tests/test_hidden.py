import sys

sys.path.insert(0, "/app")
from stats import mean, median  # noqa: E402

checks = {
    "odd": median([3, 1, 2]) == 2,
    "single": median([5]) == 5,
    "even": median([4, 1, 3, 2]) == 2.5,
    "even_two": median([10, 20]) == 15,
    "floats": median([0.5, 1.5, 2.5, 3.5]) == 2.0,
    "mean": mean([1, 2, 3, 4]) == 2.5,
}
data = [3, 1, 2, 0]
median(data)
checks["unchanged"] = data == [3, 1, 2, 0]
failed = [name for name, ok in checks.items() if not ok]
print("failed:", failed)
sys.exit(1 if failed else 0)
