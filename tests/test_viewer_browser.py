"""ragen view in a real browser: headless Chromium (Selenium + chromedriver) opens sites
from disk and checks what a researcher reads off them against the files they came from.

* a synthetic run (ragen.viewer.synthetic, a rollback and its abandoned branch): chart
  points equal the metrics, warnings and the rollback are labelled with the change the
  rollback applied, search finds a known thought, a URL with filters reloads to the
  same view, the validation states page and its diff, thoughts at picked steps, and a
  malformed reply's raw text shown open;
* the oracle with a structured reasoning format on the slippery lake: the prediction set
  beside what happened, a miss marked;
* a trained model (a tiny model warm-started in seconds, then RL with a forced
  rollback): its real thoughts, chart points equal to metrics.jsonl, the rollback;
* a visual env: the picture on the page is the one the model received;
* what a researcher looks for: a word only malformed raw replies hold (early in training)
  is found by the search, with a toggle that leaves raw replies out; a state's initial
  observation is drawn at its true aspect ratio; a 2-step run's charts tick 1 and 2.

Skipped, with the reason, where no Chromium + chromedriver (Debian: ``apt-get install
chromium chromium-driver``) or no ``selenium`` is installed; ``.ci/run`` installs them.
"""

import os
import shutil
from urllib.parse import quote

import pytest

from ragen.cli import main
from ragen.trainer.metrics_logger import read_events, read_metrics
from ragen.viewer import build_site
from ragen.viewer.load import read_episodes
from ragen.viewer.synthetic import synthesize

CHROMIUM_FLAGS = (
    "--headless=new",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)


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
    for arg in CHROMIUM_FLAGS:
        options.add_argument(arg)
    options.add_argument("--window-size=1300,900")
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    d = webdriver.Chrome(options=options, service=Service(driver))
    d.implicitly_wait(5)
    yield d
    d.quit()


# ------------------------------------------------------------------------------ helpers
def _by():
    from selenium.webdriver.common.by import By

    return By


def _text(element) -> str:
    return element.get_attribute("textContent")


def _open(chrome, url: str, ready: str = "body[data-ready='1']"):
    """Load ``url`` (fresh, even when only its hash differs) and wait until the page's
    script has drawn it."""
    from selenium.webdriver.support.ui import WebDriverWait

    chrome.get("about:blank")
    chrome.get(url)
    WebDriverWait(chrome, 10).until(lambda d: d.find_elements(_by().CSS_SELECTOR, ready))


def _text_of(chrome, css: str) -> str:
    """``textContent`` of the first element matching ``css``, looked up and read inside
    the page in one call (waits up to 10 s for it to exist)."""
    from selenium.webdriver.support.ui import WebDriverWait

    script = "const e = document.querySelector(arguments[0]); return e ? e.textContent : null;"
    return WebDriverWait(chrome, 10).until(lambda d: d.execute_script(script, css))


def _wait_text(chrome, css: str, start: str) -> str:
    """Wait (10 s) until the first element matching ``css`` reads ``start...``: a page
    redrawn after a click or a hash change is read once it has been redrawn."""
    from selenium.webdriver.support.ui import WebDriverWait

    script = "const e = document.querySelector(arguments[0]); return e ? e.textContent : null;"

    def ready(d):
        text = d.execute_script(script, css)
        return text if text is not None and text.startswith(start) else False

    return WebDriverWait(chrome, 10).until(ready)


def _wait(chrome, css: str):
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(chrome, 10).until(lambda d: d.find_element(_by().CSS_SELECTOR, css))


def _hits(turn: dict, q: str, field: str = "all", raw: bool = True) -> int:
    """The hits the viewer's search counts in one turn of a trajectories file (the rule of
    ``R.searchHits`` in assets/common.js): one per field holding ``q`` (case-insensitive),
    the raw reply counted only where the parsed thought and answer do not hold it."""
    q = q.lower()
    thought = field in ("all", "th") and q in turn["thought"].lower()
    answer = field in ("all", "a") and q in " || ".join(turn["actions"]).lower()
    observation = field in ("all", "o") and q in turn["observation"].lower()
    raw_too = field == "r" or (raw and field != "o" and not (thought or answer))
    return thought + answer + observation + (raw_too and q in turn["response"].lower())


def _run_files(run) -> list:
    """Every trajectories file of a run that the search walks, its branches included."""
    files = sorted((run / "trajectories").glob("*.jsonl"))
    return files + sorted((run / "superseded").glob("*/trajectories/*.jsonl"))


def _errors(chrome):
    return [e for e in chrome.get_log("browser") if e["level"] == "SEVERE"]


_POINTS = """
const [css] = arguments;
const line = document.querySelector(css);
if (!line) return null;
const svg = line.closest('svg'), b = k => parseFloat(svg.dataset[k]);
return line.getAttribute('points').trim().split(/\\s+/).map(p => {
  const [x, y] = p.split(',').map(Number);
  return [b('x0') + (x - b('left')) / b('pw') * (b('x1') - b('x0')),
          b('y1') - (y - b('top')) / b('ph') * (b('y1') - b('y0')), b('y1') - b('y0')];
});
"""


def _assert_chart(chrome, css: str, rows, key: str):
    """The line ``css`` (a polyline) is drawn at ``rows``' values of ``key``: its pixels,
    mapped back through the chart's axes, give each step and value."""
    points = chrome.execute_script(_POINTS, css)
    assert points, f"no chart line {css}"
    expected = [(r["step"], r[key]) for r in rows if isinstance(r.get(key), (int, float))]
    expected = [(s, v) for s, v in expected if v == v]  # NaN is not drawn
    if len(points) == len(expected) + 1:
        points = points[1:]  # a branch's line starts at the step it left the run's line
    assert len(points) == len(expected)
    for (step, value, span), (want_step, want) in zip(points, expected):
        assert step == pytest.approx(want_step, abs=0.05)
        assert value == pytest.approx(want, abs=span * 0.002 + 1e-12)


def _check_trajectory(chrome, record):
    """The trajectory page shows the record's thoughts, answers and rewards."""
    By = _by()
    _wait(chrome, "#traj-title")
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
        raw = section.find_element(By.CSS_SELECTOR, "details.raw")
        # a malformed reply's raw text is what there is to read: shown open
        assert (raw.get_attribute("open") is not None) == (not turn["format_ok"])
        chrome.implicitly_wait(0)  # an absent cell is an answer, not a wait
        cells = section.find_elements(By.CSS_SELECTOR, "td.advantage")
        chrome.implicitly_wait(5)
        if adv is None:
            assert not cells
        else:
            assert float(_text(cells[0])) == pytest.approx(adv, abs=1e-4)


# --------------------------------------------------------------------- synthetic run
@pytest.fixture(scope="module")
def synthetic(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("synthetic")
    synthesize(tmp / "run", steps=20, episodes=32)
    return tmp / "run", build_site(tmp / "run", tmp / "site")


def test_charts_and_labelled_events(chrome, synthetic):
    By = _by()
    run, index = synthetic
    _open(chrome, index.as_uri(), "#curves")
    rows = read_metrics(run)
    branch_rows = read_metrics(run / "superseded" / "rollback1_step10")
    for key in ("actor/entropy", "rollout/reward_mean"):
        _assert_chart(chrome, f'#curves polyline[data-key="{key}"][data-branch=""]', rows, key)
        css = f'#curves polyline[data-key="{key}"][data-branch="rollback1_step10"]'
        _assert_chart(chrome, css, branch_rows, key)  # the abandoned branch, faded
    _assert_chart(chrome, '#lr polyline[data-key="actor/lr"][data-branch=""]', rows, "actor/lr")
    # each signal against the run's threshold
    ref = chrome.find_element(By.CSS_SELECTOR, "#collapse-entropy line.ref-threshold")
    assert ref.get_attribute("data-y") == "0.4"
    # the warning that rolled back and the rollback itself, labelled on every chart
    warn = chrome.find_element(By.CSS_SELECTOR, '#curves .event-marker[data-signals~="entropy"]')
    assert "entropy → rollback" in _text(warn) and warn.get_attribute("data-step") == "10"
    arrow = chrome.find_element(By.CSS_SELECTOR, "#curves .rollback-marker")
    assert (arrow.get_attribute("data-from"), arrow.get_attribute("data-step")) == ("10", "5")
    row = _text(chrome.find_element(By.CSS_SELECTOR, "#events tr.ev-rollback"))
    assert "model.actor_lr 0.001 -> 0.0005" in row and "actor lr now 0.0005" in row
    chrome.find_element(By.CSS_SELECTOR, "#events tr.ev-rollback a").click()
    assert "branch-rollback1_step10-step_000010.html" in chrome.current_url
    _wait(chrome, "a.card")
    branch = read_episodes(
        run / "superseded" / "rollback1_step10" / "trajectories" / "step_000010.jsonl"
    )
    assert len(chrome.find_elements(By.CSS_SELECTOR, "a.card")) == len(branch) == 32
    assert not _errors(chrome)


def test_search_filters_in_the_url_and_reasoning_views(chrome, synthetic):
    By = _by()
    run, index = synthetic
    site = index.parent
    records = read_episodes(run / "trajectories" / "step_000003.jsonl")
    i, k = 7, 0
    thought = records[i]["turns"][k]["thought"]
    # the run-wide search finds a known thought and links to its turn
    _open(chrome, (site / "search.html").as_uri() + "#q=" + thought.replace(" ", "%20"))
    _wait(chrome, "body[data-done='1']")
    hits = [a for a in chrome.find_elements(By.CSS_SELECTOR, "a.hit-link")]
    ours = [a for a in hits if "step_000003.html#q=" in a.get_attribute("href")]
    assert ours and "&ep=7&turn=0" in ours[0].get_attribute("href")
    ours[0].click()
    _wait(chrome, "#traj-title")
    # read in one script call each: the page may draw the episode again meanwhile (a
    # handle found before that goes stale on a loaded machine)
    assert _text_of(chrome, "#turn-0 pre.thought") == thought
    assert _text_of(chrome, "#turn-0 pre.thought mark") == thought
    # filters and search in the URL: a reload (or a shared link) shows the same view
    _open(chrome, (site / "step_000002.html").as_uri())
    chrome.find_element(By.CSS_SELECTOR, "#f-outcome option[value=failure]").click()
    box = chrome.find_element(By.ID, "f-q")
    box.send_keys("careful\n")
    step2 = read_episodes(run / "trajectories" / "step_000002.jsonl")
    want = [e for e in step2 if not e["success"] and any(_hits(t, "careful") for t in e["turns"])]
    # read once drawn: while the turns load, the line says "searching 32 episodes..."
    count = _wait_text(chrome, "#count", f"{len(want)} of 32 episodes")
    cards = [c.get_attribute("data-ep") for c in chrome.find_elements(By.CSS_SELECTOR, "a.card")]
    url = chrome.current_url
    assert "outcome=failure" in url and "q=careful" in url
    assert len(cards) == len(want)
    _open(chrome, url)
    assert _wait_text(chrome, "#count", count) == count
    assert [
        c.get_attribute("data-ep") for c in chrome.find_elements(By.CSS_SELECTOR, "a.card")
    ] == cards
    assert chrome.find_element(By.ID, "f-q").get_attribute("value") == "careful"
    # a malformed reply: its raw text shown open (the synthetic run has a few)
    bad = next((n, e) for n, e in enumerate(step2) if any(not t["format_ok"] for t in e["turns"]))
    _open(chrome, (site / "step_000002.html").as_uri() + f"#ep={bad[0]}")
    _check_trajectory(chrome, bad[1])
    # each validation state across the validation steps, and a diff of its reasoning
    _open(chrome, (site / "states.html").as_uri())
    assert len(chrome.find_elements(By.CSS_SELECTOR, "#states tr[data-seed]")) == 32
    chrome.find_element(By.CSS_SELECTOR, "a.state-link").click()
    _wait(chrome, "#state-title")
    assert len(chrome.find_elements(By.CSS_SELECTOR, "#state-steps tr[data-step]")) == 2
    seed = chrome.current_url.split("seed=")[1]
    val = {
        s: next(
            e
            for e in read_episodes(run / "trajectories" / f"val_step_{s:06d}.jsonl")
            if str(e["seed"]) == seed
        )
        for s in (10, 20)
    }
    diff = chrome.find_element(By.CSS_SELECTOR, "#diff .diff-turn pre.diff")
    removed = " ".join(_text(d) for d in diff.find_elements(By.TAG_NAME, "del"))
    added = " ".join(_text(d) for d in diff.find_elements(By.TAG_NAME, "ins"))
    assert removed and added  # the thoughts of steps 10 and 20 differ
    assert all(w in val[10]["turns"][0]["thought"] for w in removed.split())
    assert all(w in val[20]["turns"][0]["thought"] for w in added.split())
    # thoughts at picked steps: pick one more, the URL keeps it
    _open(chrome, index.as_uri(), "#thought-columns")

    def columns():
        return [
            c.get_attribute("data-step")
            for c in chrome.find_elements(By.CSS_SELECTOR, "#thought-columns > div")
        ]

    assert columns() == ["1", "10", "20"]
    chrome.find_element(By.CSS_SELECTOR, '#thought-steps button[data-step="4"]').click()
    assert columns() == ["1", "4", "10", "20"] and "th=1%2C4%2C10%2C20" in chrome.current_url
    _open(chrome, chrome.current_url, "#thought-columns")
    assert columns() == ["1", "4", "10", "20"]
    assert not _errors(chrome)


# ---------------------------------------------------- the oracle, structured reasoning
def test_prediction_beside_what_happened(chrome, tmp_path):
    By = _by()
    out = tmp_path / "eval"
    args = ["eval", "--model", "oracle", "--env", "frozen_lake", "--n", "8", "--out", str(out)]
    args += ["--reasoning", "grounding_world_modeling", "--epsilon", "0.2"]
    assert main(args) == 0
    records = read_episodes(out / "trajectories.jsonl")
    index = build_site(out, tmp_path / "site")
    # one turn where the lake slipped (the prediction missed) and one where it did not
    cases = {}
    for i, rec in enumerate(records):
        for k, t in enumerate(rec["turns"]):
            facts = t["info"]["facts"]
            cases.setdefault(facts["next"] == facts["intended"], (i, k, facts))
    assert set(cases) == {True, False}
    for hit, (i, k, facts) in cases.items():
        _open(chrome, index.parent.joinpath("eval.html").as_uri() + f"#ep={i}&turn={k}")
        section = _wait(chrome, f"#turn-{k}")
        table = section.find_element(By.CSS_SELECTOR, "table.pred-vs-actual")
        assert ("mismatch" not in table.get_attribute("class")) == hit
        predicted = table.find_element(By.CSS_SELECTOR, "td.predicted .fact")
        actual = table.find_element(By.CSS_SELECTOR, "td.actual .fact")
        assert _text(predicted) == facts["intended"] and _text(actual) == facts["next"]
        assert predicted.get_attribute("class") == ("fact ok" if hit else "fact bad")
        assert actual.get_attribute("class") == ("fact ok" if hit else "fact missed")
        # the grounding: every stated fact of the state checked true
        chips = section.find_elements(By.CSS_SELECTOR, ".grounding .fact")
        assert [_text(c) for c in chips] == facts["state"].split("; ")
        assert all(c.get_attribute("class") == "fact ok" for c in chips)
        # the picture is the state: one tile of the env's own rendering per grid cell
        cells = [
            i.get_attribute("alt") for i in section.find_elements(By.CSS_SELECTOR, ".picture img")
        ]
        grid = records[i]["turns"][k]["observation"].split("\n")
        assert cells == list("".join(grid)) and len(cells) == 16
    assert not _errors(chrome)


# ------------------------------------------------------------------- a trained model
@pytest.fixture(scope="module")
def warm_model(tiny_model_dir, tmp_path_factory):
    """The nano model fine-tuned on the bandit oracle's replies for a few seconds: it
    writes real, well-formed thoughts."""
    from ragen.agent import RolloutConfig
    from ragen.sft.config import SFTConfig
    from ragen.sft.trainer import run_sft

    cfg = SFTConfig(env="bandit", rollout=RolloutConfig(max_turns=1), episodes=96, epochs=8)
    cfg.batch_size, cfg.lr = 8, 3e-3
    out = tmp_path_factory.mktemp("warm") / "sft"
    return str(run_sft(tiny_model_dir, out, cfg, log=lambda *_: None))


def test_trained_model_with_a_rollback(chrome, warm_model, tmp_path):
    By = _by()
    from test_trainer_collapse import FORCE

    run = tmp_path / "run"
    args = [
        "train",
        "env=bandit",
        "algo=grpo",
        f"model.path={warm_model}",
        "model.actor_lr=1e-3",
        "rollout.env_groups=4",
        "rollout.group_size=2",
        "rollout.max_new_tokens=24",
        "algo.ppo_mini_batch_size=8",
        "trainer.total_steps=5",
        "trainer.val_every=0",
        "trainer.save_every=2",
        "trainer.console=false",
        "trainer.tensorboard=false",
        "trainer.reasoning_samples=4",
        "trainer.on_collapse=rollback",
        "trainer.max_rollbacks=1",
        f"trainer.run_dir={run}",
        *FORCE,
    ]
    assert main(args) == 0
    (rollback,) = read_events(run, "rollback")
    index = build_site(run, tmp_path / "site")
    _open(chrome, index.as_uri(), "#curves")
    rows = read_metrics(run)
    (branch,) = [p for p in (run / "superseded").iterdir() if (p / "metrics.jsonl").exists()]
    for key in ("actor/entropy", "rollout/reward_mean"):
        _assert_chart(chrome, f'#curves polyline[data-key="{key}"][data-branch=""]', rows, key)
        css = f'#curves polyline[data-key="{key}"][data-branch="{branch.name}"]'
        _assert_chart(chrome, css, read_metrics(branch), key)
    _assert_chart(chrome, '#lr polyline[data-key="actor/lr"][data-branch=""]', rows, "actor/lr")
    arrow = chrome.find_element(By.CSS_SELECTOR, "#curves .rollback-marker")
    assert arrow.get_attribute("data-from") == str(rollback["from_step"])
    row = _text(chrome.find_element(By.CSS_SELECTOR, "#events tr.ev-rollback"))
    assert "model.actor_lr 0.001 -> 0.0005" in row and "actor lr now 0.0005" in row
    # its thoughts are real, and the page shows them as written
    chrome.find_element(By.CSS_SELECTOR, 'a.step-link[data-kind="train"]').click()
    _wait(chrome, "a.card")
    records = read_episodes(run / "trajectories" / "step_000001.jsonl")
    assert sum(bool(t["thought"]) for r in records for t in r["turns"]) >= len(records) // 2
    i = next(n for n, r in enumerate(records) if r["turns"][0]["thought"])
    chrome.find_element(By.CSS_SELECTOR, f'a.card[data-ep="{i}"]').click()
    _check_trajectory(chrome, records[i])
    # the run-wide search finds that thought wherever the model wrote it
    thought = records[i]["turns"][0]["thought"]
    _open(chrome, index.parent.joinpath("search.html").as_uri() + "#q=" + quote(thought))
    _wait(chrome, "body[data-done='1']")
    found = sum(
        _hits(t, thought) for f in _run_files(run) for r in read_episodes(f) for t in r["turns"]
    )
    assert len(chrome.find_elements(By.CSS_SELECTOR, "a.hit-link")) == min(found, 500) > 0
    assert not _errors(chrome)


# ---------------------------------------------------------------------- a visual env
def test_the_picture_the_model_saw(chrome, tiny_vlm_dir, tmp_path):
    By = _by()
    from test_viewer_visual import visual_rollout

    from ragen.agent.evaluate import write_results
    from ragen.models.vlm import load_processor

    result = visual_rollout(load_processor(tiny_vlm_dir), n_groups=1)
    out = write_results(tmp_path / "eval", result.trajectories, {}, {"env": "sokoban_visual"})
    index = build_site(out, tmp_path / "site")
    (record,) = read_episodes(out / "trajectories.jsonl")
    _open(chrome, index.parent.joinpath("eval.html").as_uri() + "#ep=0")
    _wait(chrome, "#traj-title")
    shown = [
        i.get_attribute("src") for i in chrome.find_elements(By.CSS_SELECTOR, "img.seen-image")
    ]
    assert shown == [t["info"]["images"][0] for t in record["turns"]]
    assert not _errors(chrome)


# ------------------------------------------------ what a researcher looks for (issue 52)
def test_search_finds_words_only_raw_replies_hold(chrome, synthetic):
    """Early in training most replies are malformed: they have no thought or answer, and
    what the model wrote is in the raw reply alone. The synthetic run's malformed replies
    say "Lighthouse", which no thought, answer or observation holds: the search finds
    each, links to a turn that shows it (the raw reply open, the word marked), and the
    toggle leaves raw replies out."""
    By = _by()
    run, index = synthetic
    site = index.parent
    turns = [t for f in _run_files(run) for r in read_episodes(f) for t in r["turns"]]
    assert not any(_hits(t, "lighthouse", raw=False) for t in turns)  # parsed fields: none
    want = sum(_hits(t, "Lighthouse") for t in turns)
    assert want > 4
    _open(chrome, (site / "search.html").as_uri() + "#q=Lighthouse")
    _wait(chrome, "body[data-done='1']")
    hits = chrome.find_elements(By.CSS_SELECTOR, "a.hit-link")
    assert len(hits) == min(want, 500)
    assert all(_text(h).endswith("raw reply") for h in hits)
    assert chrome.find_element(By.ID, "raw").is_selected()  # on by default
    # the toggle: raw replies left out, nothing found; in the URL, so a reload keeps it
    chrome.find_element(By.ID, "raw").click()
    chrome.find_element(By.ID, "go").click()
    # the new search starts on the hash change: wait for its own result, not the last one
    _wait_text(chrome, "#status", "0 hits")
    assert "noraw=1" in chrome.current_url
    _open(chrome, chrome.current_url, "body[data-done='1']")
    assert not chrome.find_element(By.ID, "raw").is_selected()
    assert not chrome.find_elements(By.CSS_SELECTOR, "a.hit-link")
    # a hit opens its turn with the raw reply shown and the word marked in it
    _open(chrome, (site / "search.html").as_uri() + "#q=Lighthouse")
    _wait(chrome, "body[data-done='1']")
    href = chrome.find_element(By.CSS_SELECTOR, "a.hit-link").get_attribute("href")
    turn = int(href.rsplit("turn=", 1)[1])
    _open(chrome, href, "#traj-title")
    raw = _wait(chrome, f"#turn-{turn} details.raw")
    assert raw.get_attribute("open") is not None
    assert _text_of(chrome, f"#turn-{turn} pre.response mark") == "Lighthouse"
    # the step page's own filter searches raw replies too, with the same toggle
    step2 = read_episodes(run / "trajectories" / "step_000002.jsonl")
    episodes = [e for e in step2 if any(_hits(t, "Lighthouse") for t in e["turns"])]
    assert episodes
    _open(chrome, (site / "step_000002.html").as_uri() + "#q=Lighthouse")
    _wait_text(chrome, "#count", f"{len(episodes)} of 32 episodes")
    chrome.find_element(By.ID, "f-raw").click()
    _wait_text(chrome, "#count", "0 of 32 episodes")
    assert "noraw=1" in chrome.current_url
    assert not _errors(chrome)


_PICTURE = """
const pic = document.querySelector(arguments[0]);
if (!pic) return null;
const box = pic.getBoundingClientRect();
const imgs = [...pic.querySelectorAll('img')].map(i => {
  const r = i.getBoundingClientRect();
  return [r.left - box.left, r.top - box.top, r.width, r.height, i.naturalWidth];
});
return {width: box.width, height: box.height, scroll: pic.scrollWidth, client: pic.clientWidth,
        cols: getComputedStyle(pic).gridTemplateColumns.split(' ').length, imgs: imgs};
"""


def test_the_state_picture_keeps_its_aspect_ratio(chrome, synthetic):
    """A validation state's initial observation (states.html) is drawn from the env's
    tiles at their own size: square cells in a grid as wide as its columns, no tile
    stretched, nothing sticking out past the last column."""
    _, index = synthetic
    _open(chrome, index.parent.joinpath("states.html").as_uri())
    chrome.find_element(_by().CSS_SELECTOR, "a.state-link").click()
    _wait(chrome, "#state-title")
    got = chrome.execute_script(_PICTURE, ".initial .picture")
    assert got, "no picture of the initial observation"
    rows = [line for line in _text_of(chrome, ".initial pre.observation").split("\n") if line]
    cols = len(rows[0])
    assert got["cols"] == cols and len(got["imgs"]) == cols * len(rows)
    size = got["imgs"][0][2]
    for k, (x, y, w, h, _) in enumerate(got["imgs"]):
        assert (w, h) == (size, size), f"tile {k} drawn {w} x {h}, not square"
        assert (x, y) == pytest.approx(((k % cols) * size, (k // cols) * size), abs=0.6)
    assert got["width"] == pytest.approx(cols * size, abs=1)
    assert got["width"] / got["height"] == pytest.approx(cols / len(rows), rel=0.01)
    assert got["scroll"] <= got["client"] + 1  # no band past the last column
    assert not _errors(chrome)


def test_a_two_step_run_ticks_each_step_once(chrome, tmp_path):
    """Steps are integers: with 2 steps every chart's step axis reads 1 2 (it read
    1 1 1 2 2 2: ticks every 0.2 step, rounded)."""
    synthesize(tmp_path / "run", steps=2, episodes=8)
    index = build_site(tmp_path / "run", tmp_path / "site")
    _open(chrome, index.as_uri(), "#curves")
    charts = chrome.find_elements(_by().CSS_SELECTOR, ".panel svg")
    assert len(charts) >= 4
    for svg in charts:
        ticks = [
            _text(t) for t in svg.find_elements(_by().CSS_SELECTOR, 'text[text-anchor="middle"]')
        ]
        assert ticks == ["1", "2"], f"{svg.get_attribute('data-x0')}: {ticks}"
    assert not _errors(chrome)
