"""Write the bundled text2sql data: ``data/<db_id>.sql`` databases and ``data/questions.jsonl``.

Everything is generated deterministically (fixed seeds, fixed name lists), so running
``python -m skyrl_gym.envs.sql._make_data`` reproduces the committed files byte for byte. The
``.sqlite`` files are built from the SQL text on first use (see ``_bundled.py``).
"""

from __future__ import annotations

import json
import random
from collections.abc import Iterable, Sequence
from pathlib import Path

DATA_DIR = Path(__file__).parent / "data"

FIRST = [
    "Ada",
    "Ben",
    "Chloe",
    "Dev",
    "Elena",
    "Farid",
    "Grace",
    "Hugo",
    "Ines",
    "Jonas",
    "Kira",
    "Liam",
    "Maya",
    "Noah",
    "Olga",
    "Pedro",
    "Quinn",
    "Rosa",
    "Sami",
    "Tara",
    "Umar",
    "Vera",
    "Wen",
    "Yusuf",
    "Zoe",
    "Aiko",
    "Bruno",
    "Carmen",
    "Dmitri",
    "Esther",
]
LAST = [
    "Abbott",
    "Bauer",
    "Costa",
    "Dubois",
    "Eriksen",
    "Fischer",
    "Garcia",
    "Haddad",
    "Ivanova",
    "Jensen",
    "Kowalski",
    "Lopez",
    "Moreau",
    "Nakamura",
    "Okafor",
    "Petrov",
    "Quist",
    "Rossi",
    "Silva",
    "Tanaka",
    "Ueda",
    "Varga",
    "Weber",
    "Xu",
    "Yilmaz",
    "Zhang",
]
CITIES = [
    ("Lisbon", "Portugal"),
    ("Porto", "Portugal"),
    ("Berlin", "Germany"),
    ("Munich", "Germany"),
    ("Paris", "France"),
    ("Lyon", "France"),
    ("Madrid", "Spain"),
    ("Osaka", "Japan"),
    ("Tokyo", "Japan"),
    ("Toronto", "Canada"),
    ("Lagos", "Nigeria"),
    ("Austin", "USA"),
    ("Boston", "USA"),
]


def _sql_value(value: object) -> str:
    if value is None:
        return "NULL"
    if isinstance(value, str):
        return "'" + value.replace("'", "''") + "'"
    if isinstance(value, float):
        return repr(round(value, 2))
    return str(value)


def _inserts(table: str, rows: Iterable[Sequence[object]], chunk: int = 50) -> str:
    rows = list(rows)
    out = []
    for i in range(0, len(rows), chunk):
        values = ",\n".join("(" + ", ".join(_sql_value(v) for v in row) + ")" for row in rows[i : i + chunk])
        out.append(f"INSERT INTO {table} VALUES\n{values};")
    return "\n".join(out)


def _names(rng: random.Random, n: int) -> list[str]:
    seen: set[str] = set()
    out = []
    while len(out) < n:
        name = f"{rng.choice(FIRST)} {rng.choice(LAST)}"
        if name not in seen:
            seen.add(name)
            out.append(name)
    return out


def _date(rng: random.Random, year_from: int, year_to: int) -> str:
    return f"{rng.randint(year_from, year_to)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"


# ----------------------------------------------------------------------------------------- library
def library() -> str:
    rng = random.Random(101)
    schema = """\
CREATE TABLE authors (
  author_id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  country TEXT NOT NULL,
  birth_year INTEGER
);
CREATE TABLE books (
  book_id INTEGER PRIMARY KEY,
  title TEXT NOT NULL,
  author_id INTEGER NOT NULL REFERENCES authors(author_id),
  genre TEXT NOT NULL,
  published_year INTEGER NOT NULL,
  pages INTEGER NOT NULL
);
CREATE TABLE members (
  member_id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  city TEXT NOT NULL,
  joined_year INTEGER NOT NULL
);
CREATE TABLE loans (
  loan_id INTEGER PRIMARY KEY,
  book_id INTEGER NOT NULL REFERENCES books(book_id),
  member_id INTEGER NOT NULL REFERENCES members(member_id),
  loan_date TEXT NOT NULL,
  return_date TEXT -- NULL while the book is still out
);
"""
    authors = [
        (i + 1, name, rng.choice(CITIES)[1], rng.randint(1900, 1990))
        for i, name in enumerate(_names(rng, 40))
    ]
    genres = ["Fantasy", "Mystery", "History", "Science", "Poetry", "Romance", "Biography"]
    words = [
        "Silent",
        "River",
        "Glass",
        "Winter",
        "Garden",
        "Iron",
        "Hidden",
        "Last",
        "Northern",
        "Paper",
        "Star",
        "Salt",
        "Golden",
        "Broken",
        "Quiet",
        "Lost",
    ]
    nouns = [
        "Clock",
        "Harbor",
        "Empire",
        "Letters",
        "Forest",
        "Machine",
        "Island",
        "Map",
        "Orchard",
        "Bridge",
        "Tide",
        "Lantern",
        "Atlas",
        "Crown",
    ]
    titles: set[str] = set()
    books = []
    while len(books) < 150:
        title = f"The {rng.choice(words)} {rng.choice(nouns)}"
        if title in titles:
            continue
        titles.add(title)
        books.append(
            (
                len(books) + 1,
                title,
                rng.randint(1, 40),
                rng.choice(genres),
                rng.randint(1950, 2023),
                rng.randint(90, 900),
            )
        )
    members = [
        (i + 1, name, rng.choice(CITIES[:7])[0], rng.randint(2010, 2024))
        for i, name in enumerate(_names(rng, 80))
    ]
    loans = []
    for i in range(600):
        year = rng.randint(2020, 2024)
        loan = f"{year}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        ret = (
            None
            if rng.random() < 0.08
            else f"{year + (rng.random() < 0.1)}-{rng.randint(1, 12):02d}-{rng.randint(1, 28):02d}"
        )
        if ret is not None and ret < loan:
            ret = loan
        loans.append((i + 1, rng.randint(1, 150), rng.randint(1, 74), loan, ret))
    return (
        "\n".join(
            [
                schema,
                _inserts("authors", authors),
                _inserts("books", books),
                _inserts("members", members),
                _inserts("loans", loans),
            ]
        )
        + "\n"
    )


# ----------------------------------------------------------------------------------------- retail
def retail() -> str:
    rng = random.Random(202)
    schema = """\
CREATE TABLE customers (
  customer_id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  city TEXT NOT NULL,
  country TEXT NOT NULL,
  signup_date TEXT NOT NULL
);
CREATE TABLE products (
  product_id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  category TEXT NOT NULL,
  price REAL NOT NULL
);
CREATE TABLE orders (
  order_id INTEGER PRIMARY KEY,
  customer_id INTEGER NOT NULL REFERENCES customers(customer_id),
  order_date TEXT NOT NULL,
  status TEXT NOT NULL -- 'delivered', 'shipped', 'cancelled' or 'pending'
);
CREATE TABLE order_items (
  order_id INTEGER NOT NULL REFERENCES orders(order_id),
  product_id INTEGER NOT NULL REFERENCES products(product_id),
  quantity INTEGER NOT NULL,
  unit_price REAL NOT NULL,
  PRIMARY KEY (order_id, product_id)
);
"""
    customers = []
    for i, name in enumerate(_names(rng, 200)):
        city, country = rng.choice(CITIES)
        customers.append((i + 1, name, city, country, _date(rng, 2019, 2024)))
    catalog = {
        "Electronics": ["Headphones", "Keyboard", "Monitor", "Webcam", "Charger", "Speaker", "Mouse"],
        "Kitchen": ["Kettle", "Pan", "Knife Set", "Blender", "Toaster", "Mug"],
        "Outdoor": ["Tent", "Backpack", "Lantern", "Sleeping Bag", "Water Bottle"],
        "Books": ["Cookbook", "Atlas", "Novel", "Field Guide"],
        "Toys": ["Puzzle", "Kite", "Board Game", "Building Blocks"],
    }
    products = []
    for category, items in catalog.items():
        for item in items:
            for tier in ("Basic", "Pro"):
                base = rng.uniform(5, 60) * (3 if tier == "Pro" else 1)
                products.append((len(products) + 1, f"{item} {tier}", category, round(base, 2)))
    statuses = ["delivered"] * 6 + ["shipped", "cancelled", "pending"]
    orders, items_rows = [], []
    for oid in range(1, 1201):
        orders.append((oid, rng.randint(1, 190), _date(rng, 2022, 2024), rng.choice(statuses)))
        for pid in rng.sample(range(1, len(products) - 2), rng.randint(1, 4)):
            price = products[pid - 1][3]
            items_rows.append((oid, pid, rng.randint(1, 5), price))
    return (
        "\n".join(
            [
                schema,
                _inserts("customers", customers),
                _inserts("products", products),
                _inserts("orders", orders),
                _inserts("order_items", items_rows),
            ]
        )
        + "\n"
    )


# ----------------------------------------------------------------------------------------- university
def university() -> str:
    rng = random.Random(303)
    schema = """\
CREATE TABLE departments (
  department_id INTEGER PRIMARY KEY,
  name TEXT NOT NULL UNIQUE,
  building TEXT NOT NULL
);
CREATE TABLE instructors (
  instructor_id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  department_id INTEGER NOT NULL REFERENCES departments(department_id),
  salary INTEGER NOT NULL
);
CREATE TABLE courses (
  course_id INTEGER PRIMARY KEY,
  title TEXT NOT NULL,
  department_id INTEGER NOT NULL REFERENCES departments(department_id),
  credits INTEGER NOT NULL,
  instructor_id INTEGER REFERENCES instructors(instructor_id)
);
CREATE TABLE students (
  student_id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  major_department_id INTEGER REFERENCES departments(department_id),
  enrollment_year INTEGER NOT NULL
);
CREATE TABLE enrollments (
  student_id INTEGER NOT NULL REFERENCES students(student_id),
  course_id INTEGER NOT NULL REFERENCES courses(course_id),
  semester TEXT NOT NULL, -- e.g. '2023-fall'
  grade REAL, -- 0.0 to 4.0, NULL while the course is in progress
  PRIMARY KEY (student_id, course_id, semester)
);
"""
    departments = [
        (1, "Computer Science", "Turing Hall"),
        (2, "Mathematics", "Noether Hall"),
        (3, "Physics", "Curie Hall"),
        (4, "History", "Bloch Hall"),
        (5, "Biology", "Darwin Hall"),
        (6, "Economics", "Keynes Hall"),
    ]
    instructors = [
        (i + 1, name, rng.randint(1, 6), rng.randrange(60000, 150000, 500))
        for i, name in enumerate(_names(rng, 30))
    ]
    topics = {
        1: ["Algorithms", "Databases", "Operating Systems", "Machine Learning", "Compilers", "Networks"],
        2: ["Linear Algebra", "Calculus I", "Calculus II", "Topology", "Probability"],
        3: ["Mechanics", "Quantum Physics", "Optics", "Thermodynamics"],
        4: ["Ancient Rome", "Modern Europe", "History of Science"],
        5: ["Genetics", "Ecology", "Cell Biology", "Microbiology"],
        6: ["Microeconomics", "Macroeconomics", "Econometrics"],
    }
    courses = []
    for dept, titles in topics.items():
        staff = [ins[0] for ins in instructors if ins[2] == dept]
        for title in titles:
            teacher = rng.choice(staff) if staff and rng.random() < 0.9 else None
            courses.append((len(courses) + 1, title, dept, rng.choice([3, 4, 6]), teacher))
    students = [
        (i + 1, name, rng.choice([1, 2, 3, 4, 5, 6, None]), rng.randint(2019, 2024))
        for i, name in enumerate(_names(rng, 250))
    ]
    semesters = ["2022-fall", "2023-spring", "2023-fall", "2024-spring"]
    enrollments = set()
    rows = []
    while len(rows) < 1400:
        sid, cid, sem = rng.randint(1, 250), rng.randint(1, len(courses)), rng.choice(semesters)
        if (sid, cid, sem) in enrollments:
            continue
        enrollments.add((sid, cid, sem))
        grade = (
            None if sem == "2024-spring" and rng.random() < 0.5 else round(rng.choice(range(0, 41)) / 10, 1)
        )
        rows.append((sid, cid, sem, grade))
    rows.sort()
    return (
        "\n".join(
            [
                schema,
                _inserts("departments", departments),
                _inserts("instructors", instructors),
                _inserts("courses", courses),
                _inserts("students", students),
                _inserts("enrollments", rows),
            ]
        )
        + "\n"
    )


# ----------------------------------------------------------------------------------------- flights
def flights() -> str:
    rng = random.Random(404)
    schema = """\
CREATE TABLE airports (
  code TEXT PRIMARY KEY, -- IATA code
  name TEXT NOT NULL,
  city TEXT NOT NULL,
  country TEXT NOT NULL
);
CREATE TABLE airlines (
  airline_id INTEGER PRIMARY KEY,
  name TEXT NOT NULL,
  country TEXT NOT NULL
);
CREATE TABLE flights (
  flight_id INTEGER PRIMARY KEY,
  airline_id INTEGER NOT NULL REFERENCES airlines(airline_id),
  origin TEXT NOT NULL REFERENCES airports(code),
  destination TEXT NOT NULL REFERENCES airports(code),
  departure_date TEXT NOT NULL,
  duration_min INTEGER NOT NULL,
  status TEXT NOT NULL -- 'on time', 'delayed' or 'cancelled'
);
CREATE TABLE bookings (
  booking_id INTEGER PRIMARY KEY,
  flight_id INTEGER NOT NULL REFERENCES flights(flight_id),
  passenger_name TEXT NOT NULL,
  seat_class TEXT NOT NULL, -- 'economy', 'business' or 'first'
  price REAL NOT NULL
);
"""
    airports = [
        ("LIS", "Humberto Delgado", "Lisbon", "Portugal"),
        ("OPO", "Francisco Sa Carneiro", "Porto", "Portugal"),
        ("BER", "Brandenburg", "Berlin", "Germany"),
        ("MUC", "Franz Josef Strauss", "Munich", "Germany"),
        ("CDG", "Charles de Gaulle", "Paris", "France"),
        ("LYS", "Saint-Exupery", "Lyon", "France"),
        ("MAD", "Barajas", "Madrid", "Spain"),
        ("HND", "Haneda", "Tokyo", "Japan"),
        ("KIX", "Kansai", "Osaka", "Japan"),
        ("YYZ", "Pearson", "Toronto", "Canada"),
        ("LOS", "Murtala Muhammed", "Lagos", "Nigeria"),
        ("BOS", "Logan", "Boston", "USA"),
    ]
    airlines = [
        (1, "Atlantic Air", "Portugal"),
        (2, "Rhine Wings", "Germany"),
        (3, "Seine Express", "France"),
        (4, "Sakura Sky", "Japan"),
        (5, "Maple Jet", "Canada"),
        (6, "Niger Delta Air", "Nigeria"),
        (7, "Liberty Lines", "USA"),
    ]
    codes = [a[0] for a in airports]
    flights_rows = []
    for fid in range(1, 501):
        origin, destination = rng.sample(codes, 2)
        status = rng.choices(["on time", "delayed", "cancelled"], [0.75, 0.2, 0.05])[0]
        flights_rows.append(
            (
                fid,
                rng.randint(1, 7),
                origin,
                destination,
                _date(rng, 2024, 2024),
                rng.randint(45, 780),
                status,
            )
        )
    bookings = []
    names = _names(rng, 300)
    for bid in range(1, 2001):
        seat = rng.choices(["economy", "business", "first"], [0.8, 0.15, 0.05])[0]
        base = {"economy": 1.0, "business": 3.0, "first": 6.0}[seat]
        bookings.append(
            (bid, rng.randint(1, 500), rng.choice(names), seat, round(rng.uniform(60, 400) * base, 2))
        )
    return (
        "\n".join(
            [
                schema,
                _inserts("airports", airports),
                _inserts("airlines", airlines),
                _inserts("flights", flights_rows),
                _inserts("bookings", bookings),
            ]
        )
        + "\n"
    )


DATABASES = {"library": library, "retail": retail, "university": university, "flights": flights}

# (db_id, difficulty, question, gold SQL). Gold results are compared as sets of rows, so an
# ORDER BY only matters together with LIMIT.
QUESTIONS: list[tuple[str, str, str, str]] = [
    # library
    ("library", "easy", "How many books are in the library?", "SELECT COUNT(*) FROM books;"),
    (
        "library",
        "easy",
        "List the titles of all Poetry books.",
        "SELECT title FROM books WHERE genre = 'Poetry';",
    ),
    (
        "library",
        "easy",
        "Which members live in Berlin? Give their names.",
        "SELECT name FROM members WHERE city = 'Berlin';",
    ),
    ("library", "easy", "What is the largest number of pages of any book?", "SELECT MAX(pages) FROM books;"),
    (
        "library",
        "easy",
        "How many loans have not been returned yet?",
        "SELECT COUNT(*) FROM loans WHERE return_date IS NULL;",
    ),
    (
        "library",
        "medium",
        "How many books are there in each genre? Give the genre and the count.",
        "SELECT genre, COUNT(*) FROM books GROUP BY genre;",
    ),
    (
        "library",
        "medium",
        "List the titles of the books written by authors from Japan.",
        "SELECT b.title FROM books b JOIN authors a ON a.author_id = b.author_id WHERE a.country = 'Japan';",
    ),
    (
        "library",
        "medium",
        "What is the average number of pages of Mystery books, rounded to one decimal?",
        "SELECT ROUND(AVG(pages), 1) FROM books WHERE genre = 'Mystery';",
    ),
    (
        "library",
        "medium",
        "How many loans were made in 2023?",
        "SELECT COUNT(*) FROM loans WHERE loan_date BETWEEN '2023-01-01' AND '2023-12-31';",
    ),
    (
        "library",
        "medium",
        "Which authors have written more than 5 books? Give their names.",
        "SELECT a.name FROM authors a JOIN books b ON b.author_id = a.author_id GROUP BY a.author_id HAVING COUNT(*) > 5;",
    ),
    (
        "library",
        "hard",
        "Which book has been borrowed most often? Give its title and the number of loans.",
        "SELECT b.title, COUNT(*) AS n FROM loans l JOIN books b ON b.book_id = l.book_id GROUP BY b.book_id ORDER BY n DESC, b.book_id LIMIT 1;",
    ),
    (
        "library",
        "hard",
        "List the names of members who have never borrowed a book.",
        "SELECT name FROM members WHERE member_id NOT IN (SELECT member_id FROM loans);",
    ),
    (
        "library",
        "hard",
        "For each member city, how many distinct books were borrowed by members living there?",
        "SELECT m.city, COUNT(DISTINCT l.book_id) FROM loans l JOIN members m ON m.member_id = l.member_id GROUP BY m.city;",
    ),
    (
        "library",
        "hard",
        "Which members currently hold a book (not returned) written by an author from France? Give member names.",
        "SELECT DISTINCT m.name FROM loans l JOIN members m ON m.member_id = l.member_id JOIN books b ON b.book_id = l.book_id JOIN authors a ON a.author_id = b.author_id WHERE l.return_date IS NULL AND a.country = 'France';",
    ),
    (
        "library",
        "hard",
        "Which genres have an average page count above the average page count of all books?",
        "SELECT genre FROM books GROUP BY genre HAVING AVG(pages) > (SELECT AVG(pages) FROM books);",
    ),
    (
        "library",
        "hard",
        "Give the names of the authors born before 1950 whose books were borrowed at least 20 times in total.",
        "SELECT a.name FROM authors a JOIN books b ON b.author_id = a.author_id JOIN loans l ON l.book_id = b.book_id WHERE a.birth_year < 1950 GROUP BY a.author_id HAVING COUNT(*) >= 20;",
    ),
    (
        "library",
        "medium",
        "What is the title of the oldest book (earliest published year)?",
        "SELECT title FROM books WHERE published_year = (SELECT MIN(published_year) FROM books);",
    ),
    # retail
    ("retail", "easy", "How many customers are there?", "SELECT COUNT(*) FROM customers;"),
    (
        "retail",
        "easy",
        "List the names of products in the Kitchen category.",
        "SELECT name FROM products WHERE category = 'Kitchen';",
    ),
    (
        "retail",
        "easy",
        "How many orders were cancelled?",
        "SELECT COUNT(*) FROM orders WHERE status = 'cancelled';",
    ),
    (
        "retail",
        "easy",
        "What is the price of the most expensive product?",
        "SELECT MAX(price) FROM products;",
    ),
    (
        "retail",
        "easy",
        "Which customers are from Canada? Give their names.",
        "SELECT name FROM customers WHERE country = 'Canada';",
    ),
    (
        "retail",
        "medium",
        "How many customers are there in each country?",
        "SELECT country, COUNT(*) FROM customers GROUP BY country;",
    ),
    (
        "retail",
        "medium",
        "What is the average product price per category, rounded to 2 decimals?",
        "SELECT category, ROUND(AVG(price), 2) FROM products GROUP BY category;",
    ),
    (
        "retail",
        "medium",
        "How many orders were placed in 2024?",
        "SELECT COUNT(*) FROM orders WHERE strftime('%Y', order_date) = '2024';",
    ),
    (
        "retail",
        "medium",
        "List the names of customers who placed an order in May 2023.",
        "SELECT DISTINCT c.name FROM customers c JOIN orders o ON o.customer_id = c.customer_id WHERE o.order_date LIKE '2023-05-%';",
    ),
    (
        "retail",
        "medium",
        "Which product categories have more than 10 products?",
        "SELECT category FROM products GROUP BY category HAVING COUNT(*) > 10;",
    ),
    (
        "retail",
        "hard",
        "What is the total revenue (quantity times unit price) of delivered orders, rounded to 2 decimals?",
        "SELECT ROUND(SUM(oi.quantity * oi.unit_price), 2) FROM order_items oi JOIN orders o ON o.order_id = oi.order_id WHERE o.status = 'delivered';",
    ),
    (
        "retail",
        "hard",
        "Which customer spent the most on delivered orders? Give the name.",
        "SELECT c.name FROM customers c JOIN orders o ON o.customer_id = c.customer_id JOIN order_items oi ON oi.order_id = o.order_id WHERE o.status = 'delivered' GROUP BY c.customer_id ORDER BY SUM(oi.quantity * oi.unit_price) DESC, c.customer_id LIMIT 1;",
    ),
    (
        "retail",
        "hard",
        "List the names of customers who have never placed an order.",
        "SELECT name FROM customers WHERE customer_id NOT IN (SELECT customer_id FROM orders);",
    ),
    (
        "retail",
        "hard",
        "For each category, what is the total number of units sold in non-cancelled orders?",
        "SELECT p.category, SUM(oi.quantity) FROM order_items oi JOIN products p ON p.product_id = oi.product_id JOIN orders o ON o.order_id = oi.order_id WHERE o.status <> 'cancelled' GROUP BY p.category;",
    ),
    (
        "retail",
        "hard",
        "Which products were never ordered? Give their names.",
        "SELECT name FROM products WHERE product_id NOT IN (SELECT DISTINCT product_id FROM order_items);",
    ),
    (
        "retail",
        "hard",
        "List the names of customers with more than 10 orders, and their number of orders.",
        "SELECT c.name, COUNT(*) FROM customers c JOIN orders o ON o.customer_id = c.customer_id GROUP BY c.customer_id HAVING COUNT(*) > 10;",
    ),
    (
        "retail",
        "hard",
        "Which cities have customers whose average order size (number of items lines per order) is above 2.6?",
        "SELECT c.city FROM customers c JOIN orders o ON o.customer_id = c.customer_id JOIN (SELECT order_id, COUNT(*) AS n FROM order_items GROUP BY order_id) s ON s.order_id = o.order_id GROUP BY c.city HAVING AVG(s.n) > 2.6;",
    ),
    (
        "retail",
        "medium",
        "What is the name of the cheapest product in the Electronics category?",
        "SELECT name FROM products WHERE category = 'Electronics' AND price = (SELECT MIN(price) FROM products WHERE category = 'Electronics');",
    ),
    # university
    (
        "university",
        "easy",
        "How many students are enrolled at the university?",
        "SELECT COUNT(*) FROM students;",
    ),
    ("university", "easy", "List the names of all departments.", "SELECT name FROM departments;"),
    (
        "university",
        "easy",
        "Which courses are worth 6 credits? Give the titles.",
        "SELECT title FROM courses WHERE credits = 6;",
    ),
    ("university", "easy", "What is the highest instructor salary?", "SELECT MAX(salary) FROM instructors;"),
    (
        "university",
        "easy",
        "How many students started in 2022?",
        "SELECT COUNT(*) FROM students WHERE enrollment_year = 2022;",
    ),
    (
        "university",
        "medium",
        "How many courses does each department offer? Give the department name and count.",
        "SELECT d.name, COUNT(*) FROM courses c JOIN departments d ON d.department_id = c.department_id GROUP BY d.department_id;",
    ),
    (
        "university",
        "medium",
        "What is the average salary of instructors in the Physics department?",
        "SELECT AVG(i.salary) FROM instructors i JOIN departments d ON d.department_id = i.department_id WHERE d.name = 'Physics';",
    ),
    (
        "university",
        "medium",
        "Which courses have no instructor assigned? Give their titles.",
        "SELECT title FROM courses WHERE instructor_id IS NULL;",
    ),
    (
        "university",
        "medium",
        "How many students have no declared major?",
        "SELECT COUNT(*) FROM students WHERE major_department_id IS NULL;",
    ),
    (
        "university",
        "medium",
        "In which building is the Economics department?",
        "SELECT building FROM departments WHERE name = 'Economics';",
    ),
    (
        "university",
        "hard",
        "Which courses have the most enrollments across all semesters (all courses tied for first)? Give the titles.",
        "SELECT c.title FROM enrollments e JOIN courses c ON c.course_id = e.course_id GROUP BY c.course_id HAVING COUNT(*) = (SELECT MAX(n) FROM (SELECT COUNT(*) AS n FROM enrollments GROUP BY course_id));",
    ),
    (
        "university",
        "hard",
        "List the titles of courses whose average grade is above 2.2, with the average grade rounded to 2 decimals.",
        "SELECT c.title, ROUND(AVG(e.grade), 2) FROM enrollments e JOIN courses c ON c.course_id = e.course_id GROUP BY c.course_id HAVING AVG(e.grade) > 2.2;",
    ),
    (
        "university",
        "hard",
        "Which instructors earn more than the average salary of their own department? Give their names.",
        "SELECT i.name FROM instructors i WHERE i.salary > (SELECT AVG(j.salary) FROM instructors j WHERE j.department_id = i.department_id);",
    ),
    (
        "university",
        "hard",
        "How many distinct students took at least one Computer Science course in 2023 (spring or fall)?",
        "SELECT COUNT(DISTINCT e.student_id) FROM enrollments e JOIN courses c ON c.course_id = e.course_id JOIN departments d ON d.department_id = c.department_id WHERE d.name = 'Computer Science' AND e.semester LIKE '2023-%';",
    ),
    (
        "university",
        "hard",
        "Which students are enrolled in at least 10 course sections? Give their names.",
        "SELECT s.name FROM students s JOIN enrollments e ON e.student_id = s.student_id GROUP BY s.student_id HAVING COUNT(*) >= 10;",
    ),
    (
        "university",
        "hard",
        "For each department, what is the number of enrollments in its courses that have no grade yet?",
        "SELECT d.name, COUNT(*) FROM enrollments e JOIN courses c ON c.course_id = e.course_id JOIN departments d ON d.department_id = c.department_id WHERE e.grade IS NULL GROUP BY d.department_id;",
    ),
    (
        "university",
        "hard",
        "List the names of students who never received a grade below 1.0 and have at least 5 graded enrollments.",
        "SELECT s.name FROM students s JOIN enrollments e ON e.student_id = s.student_id WHERE e.grade IS NOT NULL GROUP BY s.student_id HAVING MIN(e.grade) >= 1.0 AND COUNT(*) >= 5;",
    ),
    (
        "university",
        "medium",
        "What are the names of the instructors in the History department?",
        "SELECT i.name FROM instructors i JOIN departments d ON d.department_id = i.department_id WHERE d.name = 'History';",
    ),
    # flights
    ("flights", "easy", "How many flights are there?", "SELECT COUNT(*) FROM flights;"),
    (
        "flights",
        "easy",
        "List the codes of the airports in Japan.",
        "SELECT code FROM airports WHERE country = 'Japan';",
    ),
    (
        "flights",
        "easy",
        "How many flights were cancelled?",
        "SELECT COUNT(*) FROM flights WHERE status = 'cancelled';",
    ),
    (
        "flights",
        "easy",
        "What is the longest flight duration in minutes?",
        "SELECT MAX(duration_min) FROM flights;",
    ),
    (
        "flights",
        "easy",
        "How many bookings are in first class?",
        "SELECT COUNT(*) FROM bookings WHERE seat_class = 'first';",
    ),
    (
        "flights",
        "medium",
        "How many flights does each airline operate? Give airline name and count.",
        "SELECT a.name, COUNT(*) FROM flights f JOIN airlines a ON a.airline_id = f.airline_id GROUP BY a.airline_id;",
    ),
    (
        "flights",
        "medium",
        "What is the average booking price per seat class, rounded to 2 decimals?",
        "SELECT seat_class, ROUND(AVG(price), 2) FROM bookings GROUP BY seat_class;",
    ),
    (
        "flights",
        "medium",
        "How many flights depart from Lisbon?",
        "SELECT COUNT(*) FROM flights f JOIN airports p ON p.code = f.origin WHERE p.city = 'Lisbon';",
    ),
    (
        "flights",
        "medium",
        "Which destination airports receive more than 45 flights? Give the codes.",
        "SELECT destination FROM flights GROUP BY destination HAVING COUNT(*) > 45;",
    ),
    (
        "flights",
        "medium",
        "How many flights departed in July 2024?",
        "SELECT COUNT(*) FROM flights WHERE departure_date LIKE '2024-07-%';",
    ),
    (
        "flights",
        "hard",
        "Which airline has the highest share of delayed flights? Give the name.",
        "SELECT a.name FROM flights f JOIN airlines a ON a.airline_id = f.airline_id GROUP BY a.airline_id ORDER BY AVG(f.status = 'delayed') DESC, a.airline_id LIMIT 1;",
    ),
    (
        "flights",
        "hard",
        "What is the total booking revenue per airline, rounded to 2 decimals, for flights that were not cancelled?",
        "SELECT a.name, ROUND(SUM(b.price), 2) FROM bookings b JOIN flights f ON f.flight_id = b.flight_id JOIN airlines a ON a.airline_id = f.airline_id WHERE f.status <> 'cancelled' GROUP BY a.airline_id;",
    ),
    (
        "flights",
        "hard",
        "List the flight ids of flights with no bookings.",
        "SELECT flight_id FROM flights WHERE flight_id NOT IN (SELECT flight_id FROM bookings);",
    ),
    (
        "flights",
        "hard",
        "Which routes (origin and destination) between two different countries are flown more than 6 times?",
        "SELECT f.origin, f.destination FROM flights f JOIN airports o ON o.code = f.origin JOIN airports d ON d.code = f.destination WHERE o.country <> d.country GROUP BY f.origin, f.destination HAVING COUNT(*) > 6;",
    ),
    (
        "flights",
        "hard",
        "Which passengers booked flights on at least 6 different airlines? Give their names.",
        "SELECT b.passenger_name FROM bookings b JOIN flights f ON f.flight_id = b.flight_id GROUP BY b.passenger_name HAVING COUNT(DISTINCT f.airline_id) >= 6;",
    ),
    (
        "flights",
        "hard",
        "For each origin country, what is the average duration of its flights in minutes, rounded to the nearest integer?",
        "SELECT p.country, ROUND(AVG(f.duration_min)) FROM flights f JOIN airports p ON p.code = f.origin GROUP BY p.country;",
    ),
    (
        "flights",
        "hard",
        "Which bookings cost more than 1.7 times the average price of their seat class? Give the booking ids.",
        "SELECT b.booking_id FROM bookings b WHERE b.price > 1.7 * (SELECT AVG(c.price) FROM bookings c WHERE c.seat_class = b.seat_class);",
    ),
    (
        "flights",
        "medium",
        "What is the name of the airline based in Canada?",
        "SELECT name FROM airlines WHERE country = 'Canada';",
    ),
]


def question_rows() -> list[dict[str, object]]:
    """One dict per question; every fourth question (by position within its database) is eval."""
    rows = []
    per_db: dict[str, int] = {}
    for db_id, difficulty, question, sql in QUESTIONS:
        k = per_db.get(db_id, 0)
        per_db[db_id] = k + 1
        rows.append(
            {
                "id": f"{db_id}-{k:02d}",
                "db_id": db_id,
                "difficulty": difficulty,
                "split": "eval" if k % 4 == 3 else "train",
                "question": question,
                "sql": sql,
            }
        )
    return rows


def main() -> None:
    """Write the data files next to this module."""
    DATA_DIR.mkdir(exist_ok=True)
    for db_id, build in DATABASES.items():
        (DATA_DIR / f"{db_id}.sql").write_text(build(), encoding="utf-8")
    with open(DATA_DIR / "questions.jsonl", "w", encoding="utf-8") as f:
        for row in question_rows():
            f.write(json.dumps(row, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
