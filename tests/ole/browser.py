"""A real headless system Chromium for the `browser` tests (selenium + Debian's chromium-driver).

No download ever happens: the browser and the driver are the system's (`make install`
puts them there as root, like bubblewrap), and Selenium Manager is kept offline. The
flags keep Chromium quiet on a machine without a network: without the background
networking ones it stalls on update and sync requests.
"""
from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import contextmanager

import pytest

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--disable-dev-shm-usage", "--window-size=1400,1000")
PAGE_LOAD_TIMEOUT_S = 60


def _find(*names: str) -> str | None:
    for name in names:
        found = shutil.which(name) or (f"/usr/bin/{name}" if os.path.exists(f"/usr/bin/{name}") else None)
        if found:
            return found
    return None


@contextmanager
def chromium():
    """A selenium Chrome driver on the system Chromium, with the browser console log captured."""
    binary, driver_path = _find("chromium", "chromium-browser"), _find("chromedriver")
    if binary is None or driver_path is None:
        pytest.fail("system Chromium or chromedriver is missing: `apt-get install chromium chromium-driver` "
                    "(make install does it when run as root)")
    os.environ.setdefault("SE_OFFLINE", "true")  # Selenium Manager must never try the network
    from selenium import webdriver
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service
    profile = tempfile.mkdtemp(prefix="ole-chromium-")
    options = Options()
    options.binary_location = binary
    for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
        options.add_argument(flag)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    driver.set_page_load_timeout(PAGE_LOAD_TIMEOUT_S)
    try:
        yield driver
    finally:
        driver.quit()
        shutil.rmtree(profile, ignore_errors=True)


def console_errors(driver) -> list[str]:
    """SEVERE console entries since the last call (the log is drained by reading it)."""
    return [e["message"] for e in driver.get_log("browser") if e.get("level") == "SEVERE"]
