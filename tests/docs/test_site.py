"""The docs site builds strictly, every internal link of the built pages resolves, each package's
API page renders every public module, and the pages work in headless Chromium (the home page and a
tutorial render, search finds a page)."""

from __future__ import annotations

import functools
import http.server
import re
import shutil
import subprocess
import sys
import threading
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import unquote, urlsplit

import pytest

from tests.docs._cdp import Browser
from tests.docs._markdown import REPO

SITE = REPO / "build" / "site"
PACKAGES = ("skyrl_gym", "skyrl_agent", "trainers", "integrations", "harbor_adapter")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.fixture(scope="module")
def site() -> Path:
    """The site as `python docs/site.py` builds it (strict: any MkDocs warning fails it)."""
    proc = subprocess.run(
        [sys.executable, "docs/site.py"], cwd=REPO, capture_output=True, text=True, timeout=600
    )
    assert proc.returncode == 0, (
        f"the strict site build failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-8000:]}"
    )
    assert (SITE / "index.html").is_file()
    return SITE


class _Page(HTMLParser):
    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.ids: set[str] = set()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if attrs.get("id"):
            self.ids.add(attrs["id"])
        if tag == "a" and attrs.get("name"):
            self.ids.add(attrs["name"])
        for key in ("href", "src"):
            if attrs.get(key) and tag in ("a", "img", "link", "script"):
                self.hrefs.append(attrs[key])


def _parse(path: Path) -> _Page:
    page = _Page()
    page.feed(path.read_text(errors="replace"))
    return page


def _target(site: Path, page: Path, href: str) -> tuple[Path, str] | None:
    """The file an internal ``href`` of ``page`` names, and its fragment; None for external links."""
    parts = urlsplit(href)
    if parts.scheme or parts.netloc or href.startswith("mailto:"):
        return None
    if not parts.path:
        return page, unquote(parts.fragment)
    base = site if parts.path.startswith("/") else page.parent  # 404.html links from the site's root
    path = (base / unquote(parts.path).lstrip("/")).resolve()
    if parts.path.endswith("/") or path.is_dir():
        path = path / "index.html"
    return path, unquote(parts.fragment)


def test_every_internal_link_of_the_built_site_resolves(site):
    pages = {p.resolve(): _parse(p) for p in site.rglob("*.html")}
    assert len(pages) > 60, sorted(pages)
    broken = []
    for path, parsed in pages.items():
        for href in parsed.hrefs:
            target = _target(site, path, href)
            if target is None:
                continue
            file, fragment = target
            where = f"{path.relative_to(site.resolve())}: {href}"
            if not file.is_file() or not file.is_relative_to(site.resolve()):
                broken.append(f"{where} (no file)")
            elif fragment and file.suffix == ".html" and fragment not in pages[file].ids:
                broken.append(f"{where} (no anchor #{fragment})")
    assert not broken, "\n".join(broken[:50])


def _public_modules(package: str) -> list[str]:
    root = REPO / package
    names = []
    for path in sorted(root.rglob("*.py")):
        parts = path.relative_to(REPO).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if any(p.startswith("_") for p in parts):
            continue
        # bundled data (task folders, the SWE tasks' repositories) lives in folders that are not packages
        rel = path.relative_to(REPO)
        if any(
            not (REPO.joinpath(*rel.parts[:i]) / "__init__.py").is_file() for i in range(1, len(rel.parts))
        ):
            continue
        names.append(".".join(parts))
    return names


@pytest.mark.parametrize("package", PACKAGES)
def test_each_api_page_renders_every_public_module(site, package):
    ids = _parse(site / "docs" / "api" / package / "index.html").ids
    missing = [m for m in _public_modules(package) if m not in ids]
    assert not missing, f"modules without a section on {package}'s API page: {missing}"
    # a documented function shows up too, with its signature
    assert f"{package}" in ids and len([i for i in ids if i.startswith(f"{package}.")]) > 10


@pytest.fixture(scope="module")
def served(site):
    handler = functools.partial(_QuietHandler, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        thread.join(10)
        server.server_close()


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def _first_heading(markdown: Path) -> str:
    return next(line[2:].strip() for line in markdown.read_text().splitlines() if line.startswith("# "))


def _plain(text: str) -> str:
    return re.sub(r"[`*]", "", text)


def _h1(browser: Browser) -> str:
    """The page's title heading as shown, without its permalink mark."""
    return browser.evaluate("document.querySelector('.md-content h1').textContent").strip().rstrip("\u00b6")


@pytest.mark.skipif(CHROMIUM is None, reason="no headless Chromium here (Debian package `chromium`)")
def test_home_page_and_a_tutorial_render_and_search_finds_a_page(served):
    tutorial = REPO / "docs" / "tutorials" / "01-write-an-env.md"
    fences = sum(1 for line in tutorial.read_text().splitlines() if line.startswith("```") and len(line) > 3)
    with Browser(CHROMIUM) as browser:
        browser.open(f"{served}/")
        assert _h1(browser) == _plain(_first_heading(REPO / "README.md"))
        # the navigation lists the tutorials, and the theme's script ran (it builds the drawer)
        nav = browser.evaluate("[...document.querySelectorAll('nav a')].map(a => a.textContent.trim())")
        assert "Write an env in twenty lines" in nav, nav

        browser.open(f"{served}/docs/tutorials/01-write-an-env/")
        assert _h1(browser) == _plain(_first_heading(tutorial))
        assert browser.evaluate("document.querySelectorAll('pre > code').length") == fences
        assert browser.evaluate("document.querySelector('pre > code').textContent").strip()

        # the search box: a query in the address, as a shared search link has it
        browser.open(f"{served}/?q=kvchain")
        count = browser.wait_for("document.querySelectorAll('.md-search-result__item').length", timeout=60)
        links = browser.evaluate(
            "[...document.querySelectorAll('.md-search-result__item a')].map(a => a.href)"
        )
        assert count >= 2 and any("/examples/multiturn/" in link for link in links), links
