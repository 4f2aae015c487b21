"""ragen view in a real browser: headless Chromium (Selenium + chromedriver) opens the site
of a short real training run from disk and walks overview -> step -> trajectory.

Skipped, with the reason, where no Chromium + chromedriver (Debian: ``apt-get install
chromium chromium-driver``) or no ``selenium`` is installed; ``.ci/run`` installs them.
"""

import json
import os
import shutil

import pytest
from fakes import short_train_args

from ragen.cli import main
from ragen.viewer import build_site
from ragen.viewer.load import read_episodes


def _browser_paths():
    browser = os.environ.get("RAGEN_CHROMIUM") or next(
        filter(None, map(shutil.which, ("chromium", "chromium-browser", "google-chrome"))), None
    )
    driver = os.environ.get("RAGEN_CHROMEDRIVER") or shutil.which("chromedriver")
    return browser, driver


@pytest.fixture(scope="module")
def chrome():
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed")
    from selenium.webdriver.chrome.service import Service

    browser, driver = _browser_paths()
    if not browser or not driver:
        pytest.skip("no Chromium + chromedriver found (apt-get install chromium chromium-driver)")
    options = webdriver.ChromeOptions()
    options.binary_location = browser
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage"):
        options.add_argument(arg)
    options.add_argument("--window-size=1300,900")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(options=options, service=Service(driver))
    d.implicitly_wait(5)
    yield d
    d.quit()


def _text(element) -> str:
    return element.get_attribute("textContent")


def _errors(chrome):
    return [e for e in chrome.get_log("browser") if e["level"] == "SEVERE"]


def _check_trajectory(chrome, record):
    """The trajectory page shows the record's thoughts, answers and rewards."""
    from selenium.webdriver.common.by import By

    turns = chrome.find_elements(By.CSS_SELECTOR, "section.turn")
    assert len(turns) == len(record["turns"])
    shown = float(_text(chrome.find_element(By.CSS_SELECTOR, "td.ep-reward")))
    assert shown == pytest.approx(record["episode_reward"], abs=1e-3)
    advantages = record.get("advantages") or [None] * len(turns)
    for section, turn, adv in zip(turns, record["turns"], advantages):
        assert _text(section.find_element(By.CSS_SELECTOR, "pre.thought")) == turn["thought"]
        answer = _text(section.find_element(By.CSS_SELECTOR, "pre.answer"))
        assert answer == " || ".join(turn["actions"])
        assert _text(section.find_element(By.CSS_SELECTOR, "pre.response")) == turn["response"]
        reward = float(_text(section.find_element(By.CSS_SELECTOR, "td.turn-reward")))
        assert reward == pytest.approx(turn["reward"], abs=1e-3)
        env_reward = float(_text(section.find_element(By.CSS_SELECTOR, "td.env-reward")))
        assert env_reward == pytest.approx(turn["env_reward"], abs=1e-3)
        chrome.implicitly_wait(0)  # an absent cell is an answer, not a wait
        cells = section.find_elements(By.CSS_SELECTOR, "td.advantage")
        chrome.implicitly_wait(5)
        if adv is None:
            assert not cells
        else:
            assert float(_text(cells[0])) == pytest.approx(adv, abs=1e-4)


def test_overview_step_trajectory_in_chromium(chrome, tiny_model_dir, tmp_path):
    from selenium.webdriver.common.by import By

    run = tmp_path / "run"
    args = short_train_args(tiny_model_dir, run)
    assert main(args) == 0
    index = build_site(run, tmp_path / "site")
    chrome.get(index.resolve().as_uri())
    assert chrome.find_elements(By.CSS_SELECTOR, ".panel svg")  # the curves
    chrome.find_element(By.CSS_SELECTOR, 'a.step-link[data-kind="train"]').click()
    assert "step_000001.html" in chrome.current_url
    cards = chrome.find_elements(By.CSS_SELECTOR, "a.card")
    records = read_episodes(run / "trajectories" / "step_000001.jsonl")
    assert len(cards) == len(records) == 4
    kept = [c for c in cards if "filtered" not in c.get_attribute("class")]
    target = kept[0]  # a trained episode: its turns carry advantages
    i = int(target.get_attribute("data-ep"))
    target.click()
    assert chrome.current_url.endswith(f"#ep={i}")
    assert records[i]["kept"] is True and all(a is not None for a in records[i]["advantages"])
    _check_trajectory(chrome, records[i])
    assert chrome.find_elements(By.CSS_SELECTOR, ".picture img")  # sokoban's rgb tiles
    chrome.save_screenshot(str(tmp_path / "trajectory.png"))
    # the filters work on the step page: only the filtered-out group remains
    chrome.find_element(By.ID, "back").click()
    chrome.find_element(By.CSS_SELECTOR, "#f-kept option[value=filtered]").click()
    remaining = chrome.find_elements(By.CSS_SELECTOR, "a.card")
    assert len(remaining) == sum(r["kept"] is False for r in records)
    assert not _errors(chrome)
    assert (tmp_path / "trajectory.png").stat().st_size > 5000


def test_eval_output_thoughts_in_chromium(chrome, tmp_path):
    from selenium.webdriver.common.by import By

    out = tmp_path / "eval"
    args = ["eval", "--model", "oracle", "--env", "frozen_lake", "--n", "3", "--out", str(out)]
    assert main(args) == 0
    index = build_site(out, tmp_path / "site")
    chrome.get(index.resolve().as_uri())
    chrome.find_element(By.CSS_SELECTOR, "a.step-link").click()
    chrome.find_elements(By.CSS_SELECTOR, "a.card")[0].click()
    i = int(chrome.current_url.rsplit("=", 1)[1])
    record = read_episodes(out / "trajectories.jsonl")[i]
    assert any(t["thought"] for t in record["turns"])  # the oracle explains its moves
    _check_trajectory(chrome, record)
    assert not _errors(chrome)
    assert json.loads((out / "metrics.json").read_text())["metrics"]
