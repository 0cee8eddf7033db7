"""The HTML leaderboard in a real headless Chromium: no console errors, every row shown, sorting works.

Needs Debian's `chromium` and `chromium-driver` (`.ci/run` installs them) and selenium (the `test`
extra). Skipped where Chromium is missing, except in CI (`CI` set), where that is a failure.
"""

from __future__ import annotations

import os
import shutil

import numpy as np
import pytest

from tests.test_leaderboard import fake_run
from unlearnbench.report.leaderboard import ORACLE_LABEL, build_leaderboard

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--window-size=1400,1000",
)

if not (CHROMIUM and CHROMEDRIVER):
    if os.environ.get("CI"):
        pytest.fail("chromium and chromium-driver are missing (.ci/run installs them)", pytrace=False)
    pytest.skip("chromium and chromium-driver are not installed", allow_module_level=True)
webdriver = pytest.importorskip("selenium.webdriver")
By = pytest.importorskip("selenium.webdriver.common.by").By


@pytest.fixture
def browser(tmp_path):
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in (*FLAGS, f"--user-data-dir={tmp_path / 'profile'}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(options=options, service=webdriver.ChromeService(executable_path=CHROMEDRIVER))
    try:
        yield driver
    finally:
        driver.quit()


def _order(table) -> list[str]:
    return [row.get_attribute("data-method") for row in table.find_elements(By.CSS_SELECTOR, "tbody.methods tr")]


def test_html_page_loads_shows_every_row_and_sorts(tmp_path, browser):
    rng = np.random.default_rng(3)
    root = tmp_path / "runs"
    methods = ("finetune", "ga", "neggrad_plus", "rl", "salun")
    for method in methods:
        for seed in (0, 1):
            fake_run(root, method, seed, rng)
    fake_run(root, "scrub", 0, rng, done=1, status=None)  # unfinished: shown, never dropped
    board = build_leaderboard(root, tmp_path / "board")
    browser.get(board.files["html"].as_uri())

    errors = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert errors == []
    assert browser.title == "unlearnbench leaderboard"
    (table,) = browser.find_elements(By.CSS_SELECTOR, "table.leaderboard.headline")
    pinned = table.find_elements(By.CSS_SELECTOR, "tbody.pinned tr")
    assert [row.get_attribute("data-method") for row in pinned] == [ORACLE_LABEL]
    shown = _order(table)
    assert sorted(shown) == sorted([*methods, "scrub"])
    assert all(row.is_displayed() for row in table.find_elements(By.CSS_SELECTOR, "tbody tr"))
    assert "0 of 1" in table.text  # scrub's unfinished run: the headline's count says so
    (details,) = browser.find_elements(By.CSS_SELECTOR, "details.all")
    (everything,) = details.find_elements(By.CSS_SELECTOR, "table.leaderboard.all")
    assert not everything.is_displayed()  # folded until asked for
    details.find_element(By.TAG_NAME, "summary").click()
    assert everything.is_displayed()
    assert "unfinished (1/3)" in everything.text
    assert len(browser.find_elements(By.CSS_SELECTOR, ".plots img")) >= 3

    (group,) = board.groups
    means = {e.label: e.cells["retain_acc"].mean for e in group.entries}
    ascending = sorted((m for m in means if means[m] is not None), key=lambda m: means[m])
    _assert_headline_reads_at_1400_px(browser, table)
    header = table.find_element(By.CSS_SELECTOR, 'th[data-key="retain_acc"]')
    header.click()
    assert _order(table) == [*ascending, "scrub"]  # missing values last
    assert "sorted-asc" in header.get_attribute("class")
    header.click()
    assert _order(table) == [*reversed(ascending), "scrub"]
    assert _order(table) != shown or shown == [*reversed(ascending), "scrub"]
    table.find_element(By.CSS_SELECTOR, "th.label").click()  # the method column sorts by name
    assert _order(table) == sorted(shown)
    pinned = table.find_elements(By.CSS_SELECTOR, "tbody.pinned tr")
    assert [row.get_attribute("data-method") for row in pinned] == [ORACLE_LABEL]  # the oracle stays on top
    errors = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert errors == []


def _assert_headline_reads_at_1400_px(browser, table) -> None:
    """At the window's 1400 px, every headline column is inside the window and its box has nothing to scroll."""
    width = browser.execute_script("return window.innerWidth")
    assert width <= 1400
    box = table.find_element(By.XPATH, "..")
    assert browser.execute_script("return arguments[0].scrollWidth <= arguments[0].clientWidth", box)
    headers = table.find_elements(By.CSS_SELECTOR, "thead th")
    assert 3 <= len(headers) <= 8
    for header in headers:
        assert header.is_displayed()
        assert browser.execute_script("return arguments[0].getBoundingClientRect().right", header) <= width
    top = browser.execute_script("return arguments[0].getBoundingClientRect().top", table)
    assert top < browser.execute_script("return window.innerHeight")  # in the first screen, no scrolling down
