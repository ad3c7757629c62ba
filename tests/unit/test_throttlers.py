"""The built-in throttlers share, per_key and rate: behaviour, reasons, config errors, properties.

The property tests drive a throttler (or a chain) the way a queue's loop does:
jobs arrive, each tick the throttler judges the waiting jobs against the
in-flight ones, admitted jobs become in-flight and are recorded as starts, jobs
finish, the clock moves. After every tick the limits must hold, and once the
in-flight jobs finish every waiting job must start eventually.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hipq.jobs import Job
from hipq.lifecycle import State
from hipq.plugins import THROTTLERS, PluginError, build, installed
from hipq.throttling import InFlight, RunningView, Stage, Start, Verdict
from tests.chains import run_chain
from tests.factories import make_job
from throttlers.per_key import PerKey
from throttlers.rate import Rate
from throttlers.shares import OTHER, Shares

NOW = datetime(2024, 3, 1, 12, 0, tzinfo=UTC)
_ids = itertools.count(1)

PROPERTY = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def job(weight: int = 1, payload: dict[str, Any] | None = None, **labels: str | None) -> Job:
    return make_job(
        id=next(_ids),
        type="t",
        state=State.SCHEDULED,
        payload=payload or {},
        run_at=NOW,
        weight=weight,
        labels={k: v for k, v in labels.items() if v is not None},
        attempt=0,
        created_at=NOW,
        updated_at=NOW,
        claimed_at=None,
    )


def flying(j: Job, at: datetime = NOW) -> InFlight:
    return InFlight(
        id=j.id, type=j.type, weight=j.weight, labels=j.labels, claimed_at=at, payload=j.payload
    )


def view(*running: Job, starts: Sequence[Start] = ()) -> RunningView:
    return RunningView([flying(j) for j in running], starts)


def share(capacity: int | None = 10, **options: Any) -> Shares:
    options = {"label": "region", "shares": {"east": 40, "north": 30, "west": 30}, **options}
    if capacity is not None:
        options["capacity"] = capacity
    return build(THROTTLERS, "share", options)


def admitted(verdict: Verdict, *jobs: Job) -> bool:
    return verdict.admitted == [j.id for j in jobs]


# --- registration ------------------------------------------------------------------------


def test_built_ins_are_registered_as_entry_points() -> None:
    names = installed(THROTTLERS)
    assert names["share"].load() is Shares
    assert names["per_key"].load() is PerKey
    assert names["rate"].load() is Rate


# --- share -------------------------------------------------------------------------------


def test_quota_is_the_floor_of_the_percent_of_the_capacity() -> None:
    assert share(capacity=10).quotas == {"east": 4, "north": 3, "west": 3}
    assert share(capacity=100, shares={"a": 29, "b": 33.3}).quotas == {"a": 29, "b": 33}
    assert share(capacity=7, shares={"a": 50}, other=50).quotas == {"a": 3, OTHER: 3}


def test_share_never_exceeds_its_quota_without_lending() -> None:
    easts = [job(region="east") for _ in range(6)]
    norths = [job(region="north") for _ in range(2)]
    verdict = share().decide([*easts, *norths], view(), NOW)
    assert admitted(verdict, *easts[:4], *norths)
    assert verdict.held == {j.id: "share region=east 4/4 in use" for j in easts[4:]}


def test_in_flight_weight_counts_against_the_share() -> None:
    running = [job(weight=3, region="east")]
    easts = [job(region="east"), job(region="east")]
    verdict = share().decide(easts, view(*running), NOW)
    assert admitted(verdict, easts[0])
    assert verdict.held == {easts[1].id: "share region=east 4/4 in use"}


def test_scan_room_names_the_shares_that_could_take_a_job() -> None:
    # Quotas east 4, north 3, west 2, other 1.
    strict = share(capacity=10, shares={"east": 40, "north": 30, "west": 20}, other=10)
    east = [job(region="east") for _ in range(4)]
    assert strict.scan_groups.label == "region"
    assert strict.scan_groups.values == ("east", "north", "west")
    assert strict.scan_groups.others
    assert strict.scan_room(view()) == {"east", "north", "west", None}
    assert strict.scan_room(view(*east, job(region="south"))) == {"north", "west"}
    # Lending: while the capacity has room, any share may borrow.
    lending = share(capacity=10, lend=True)
    assert not lending.scan_groups.others
    assert lending.scan_room(view(*east)) == {"east", "north", "west"}
    full = [job(region="north") for _ in range(3)] + [job(region="west") for _ in range(3)]
    assert lending.scan_room(view(*east, *full)) == set()


def test_heavy_job_holds_its_own_share_only() -> None:
    running = [job(weight=2, region="east")]
    heavy, light, north = job(weight=3, region="east"), job(region="east"), job(region="north")
    verdict = share().decide([heavy, light, north], view(*running), NOW)
    assert admitted(verdict, north)
    assert verdict.held == {
        heavy.id: "share region=east 2/4 in use, needs 3",
        light.id: "share region=east 2/4 in use",
    }


def test_job_heavier_than_its_quota_is_held_without_blocking_its_share() -> None:
    too_heavy, light = job(weight=5, region="east"), job(region="east")
    verdict = share().decide([too_heavy, light], view(), NOW)
    assert admitted(verdict, light)
    assert verdict.held == {too_heavy.id: "share region=east: weight 5 exceeds its quota 4"}


def test_jobs_without_a_share_are_held_unless_other_has_a_percent() -> None:
    south, bare, east = job(region="south"), job(), job(region="east")
    verdict = share().decide([south, bare, east], view(), NOW)
    assert admitted(verdict, east)
    assert verdict.held == {
        south.id: "share: no share for region=south",
        bare.id: "share: no share for jobs without region",
    }
    # With `other`, unlisted and missing values fill one bucket together.
    throttler = share(shares={"east": 40, "north": 30}, other=20)
    running = [job(region="south")]
    south2, bare2 = job(region="south"), job()
    verdict = throttler.decide([south2, bare2], view(*running), NOW)
    assert admitted(verdict, south2)
    assert verdict.held == {bare2.id: "share region=(other) 2/2 in use"}


def test_lending_lets_a_busy_share_use_idle_capacity() -> None:
    norths = [job(region="north") for _ in range(12)]
    verdict = share(lend=True).decide(norths, view(), NOW)
    assert admitted(verdict, *norths[:10])
    assert verdict.held == {
        j.id: "share region=north 10/3 in use, 0 free to borrow" for j in norths[10:]
    }


def test_lending_serves_owners_before_borrowers() -> None:
    # North's jobs come first in queue order, but east's own quota is served first.
    norths = [job(region="north") for _ in range(8)]
    easts = [job(region="east") for _ in range(2)]
    verdict = share(lend=True).decide([*norths, *easts], view(), NOW)
    assert admitted(verdict, *norths, *easts)
    easts = [job(region="east") for _ in range(4)]
    verdict = share(lend=True).decide([*norths, *easts], view(), NOW)
    assert admitted(verdict, *norths[:6], *easts)
    assert verdict.held[norths[6].id] == "share region=north 6/3 in use, 0 free to borrow"


def test_lent_capacity_is_taken_back_as_borrowers_finish() -> None:
    throttler = share(lend=True)
    borrowed = [job(region="north") for _ in range(10)]
    east = [job(region="east") for _ in range(3)]
    north = job(region="north")
    verdict = throttler.decide([north, *east], view(*borrowed), NOW)
    assert verdict.admitted == []
    lent_out = "share region=east 0/4 in use, capacity 10/10 in use (lent out)"
    assert verdict.held == {
        north.id: "share region=north 10/3 in use, 0 free to borrow",
        **{j.id: lent_out for j in east},
    }
    # Two borrowed units come back: east takes them, and north may not borrow east's
    # remaining quota while east still waits.
    verdict = throttler.decide([north, *east], view(*borrowed[2:]), NOW)
    assert admitted(verdict, *east[:2])
    assert verdict.held[east[2].id] == (
        "share region=east 2/4 in use, capacity 10/10 in use (lent out)"
    )
    assert verdict.held[north.id] == "share region=north 8/3 in use, 0 free to borrow"


def test_borrowers_cannot_take_the_quota_a_waiting_owner_reserves() -> None:
    # Capacity 10: west has borrowed 5 (quota 3); east waits for 2 within its quota of 4.
    throttler = share(lend=True)
    running = [job(region="west") for _ in range(5)] + [job(region="north") for _ in range(3)]
    heavy_east = job(weight=3, region="east")
    north = job(region="north")
    verdict = throttler.decide([heavy_east, north], view(*running), NOW)
    assert verdict.admitted == []
    assert verdict.held[heavy_east.id] == (
        "share region=east 0/4 in use, capacity 8/10 in use (lent out), needs 3"
    )
    assert verdict.held[north.id] == "share region=north 3/3 in use, 0 free to borrow"


def test_share_takes_the_queue_concurrency_when_it_has_no_capacity() -> None:
    throttler = share(capacity=None)
    with pytest.raises(RuntimeError, match="not bound"):
        throttler.decide([job(region="east")], view(), NOW)
    with pytest.raises(ValueError, match=r"^share needs a capacity: set capacity or the queue's"):
        throttler.bind("default", None)
    throttler.bind("default", 20)
    assert throttler.quotas == {"east": 8, "north": 6, "west": 6}
    own = share(capacity=10)
    own.bind("default", 1000)  # its own capacity wins
    assert own.quotas == {"east": 4, "north": 3, "west": 3}
    with pytest.raises(ValueError, match="share 'tiny': 5 % of a capacity of 10 is less"):
        share(capacity=None, shares={"big": 90, "tiny": 5}).bind("default", 10)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"shares": {"east": 40}}, "label: Field required"),
        ({"label": "region"}, "shares: Field required"),
        ({"label": "region", "shares": {}}, "list at least one label value"),
        ({"label": "region", "shares": {"east": 0}}, "share 'east' must be a percent above 0"),
        ({"label": "region", "shares": {"east": 60, "west": 50}}, "add up to 110 %, more than 100"),
        ({"label": "region", "shares": {"east": 60}, "other": 50}, "add up to 110 %"),
        ({"label": "region", "shares": {"east": 60}, "capacity": 0}, "capacity: Input should be"),
        ({"label": "region", "shares": {"east": 5}, "capacity": 10}, "less than one unit"),
        (
            {"label": "region", "shares": {"east": 60}, "other": 5, "capacity": 10},
            "other: 5 % of a capacity of 10 is less than one unit",
        ),
        ({"label": "region", "shares": {"east": 60}, "lend": "maybe"}, "lend: Input should be"),
        ({"label": "region", "shares": {"east": 60}, "borrow": True}, "borrow: Extra inputs"),
    ],
)
def test_share_settings_errors(options: dict[str, Any], message: str) -> None:
    with pytest.raises(PluginError, match=message):
        build(THROTTLERS, "share", options)


def test_share_reads_yaml_int_label_values_as_strings() -> None:
    throttler = share(shares={1: 50, 2: 50})
    one = job(region="1")
    assert admitted(throttler.decide([one], view(), NOW), one)


# --- per_key -----------------------------------------------------------------------------


def per_key(**options: Any) -> PerKey:
    return build(THROTTLERS, "per_key", {"key": "labels.tenant", "limit": 1, **options})


def test_per_key_limit_one_runs_a_key_in_series() -> None:
    running = [job(tenant="acme")]
    acme, beta1, beta2, nobody = job(tenant="acme"), job(tenant="beta"), job(tenant="beta"), job()
    verdict = per_key().decide([acme, beta1, beta2, nobody], view(*running), NOW)
    assert admitted(verdict, beta1, nobody)
    assert verdict.held == {
        acme.id: "per_key tenant=acme 1/1 in flight",
        beta2.id: "per_key tenant=beta 1/1 in flight",
    }


def test_per_key_can_hold_jobs_without_the_key() -> None:
    nobody = job()
    verdict = per_key(missing="hold").decide([nobody], view(), NOW)
    assert verdict.held == {nobody.id: "per_key: job has no tenant"}


def test_per_key_reads_a_dotted_payload_path() -> None:
    throttler = per_key(key="payload.customer.id", limit=2)
    running = [job(payload={"customer": {"id": 17}})]
    same = [job(payload={"customer": {"id": "17"}}), job(payload={"customer": {"id": 17}})]
    other = job(payload={"customer": {"id": 18}})
    no_key = [job(payload={"customer": 17}), job(payload={"customer": {"id": None}})]
    verdict = throttler.decide([*same, other, *no_key], view(*running), NOW)
    assert admitted(verdict, same[0], other, *no_key)
    assert verdict.held == {same[1].id: "per_key payload.customer.id=17 2/2 in flight"}


def test_per_key_counts_jobs_unless_told_to_count_weight() -> None:
    heavy = [job(weight=5, tenant="acme") for _ in range(3)]
    assert admitted(per_key(limit=2).decide(heavy, view(), NOW), *heavy[:2])
    throttler = per_key(limit=3, count="weight")
    two, three, one, four = (job(weight=w, tenant="acme") for w in (2, 3, 1, 4))
    verdict = throttler.decide([two, three, one, four], view(), NOW)
    assert admitted(verdict, two)  # three does not fit and holds one behind it
    assert verdict.held == {
        three.id: "per_key tenant=acme 2/3 in flight",
        one.id: "per_key tenant=acme 2/3 in flight",
        four.id: "per_key tenant=acme: weight 4 exceeds the limit 3",
    }


def test_per_key_shortens_long_key_values_in_reasons() -> None:
    long = "x" * 200
    running, waiting = job(tenant=long), job(tenant=long)
    reason = per_key().decide([waiting], view(running), NOW).held[waiting.id]
    assert reason == f"per_key tenant={'x' * 59}… 1/1 in flight"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"key": "tenant", "limit": 1}, "key must be 'labels.<name>' or 'payload.<field>"),
        ({"key": "labels.a.b", "limit": 1}, "key must be"),
        ({"key": "payload.", "limit": 1}, "key must be"),
        ({"key": "labels.tenant", "limit": 0}, "limit: Input should be greater than or equal to 1"),
        ({"key": "labels.tenant"}, "limit: Field required"),
        ({"key": "labels.tenant", "limit": 1, "missing": "skip"}, "missing: Input should be"),
        ({"key": "labels.tenant", "limit": 1, "count": "bytes"}, "count: Input should be"),
    ],
)
def test_per_key_settings_errors(options: dict[str, Any], message: str) -> None:
    with pytest.raises(PluginError, match=message):
        build(THROTTLERS, "per_key", options)


# --- rate --------------------------------------------------------------------------------


def rate(**options: Any) -> Rate:
    return build(THROTTLERS, "rate", {"limit": 3, "per": "1s", **options})


def test_rate_counts_starts_in_the_last_period_and_its_own_admissions() -> None:
    starts = [
        Start(NOW - timedelta(seconds=1), {}),  # exactly one period ago: outside
        Start(NOW - timedelta(milliseconds=999), {}),
        Start(NOW - timedelta(milliseconds=10), {}),
    ]
    jobs = [job() for _ in range(3)]
    verdict = rate().decide(jobs, view(starts=starts), NOW)
    assert admitted(verdict, jobs[0])
    assert verdict.held == {j.id: "rate 3 per 1s reached" for j in jobs[1:]}


def test_rate_per_label_value() -> None:
    throttler = rate(limit=1, per="1m", label="region")
    starts = [Start(NOW - timedelta(seconds=30), {"region": "east"})]
    east, west, bare1, bare2 = job(region="east"), job(region="west"), job(), job()
    verdict = throttler.decide([east, west, bare1, bare2], view(starts=starts), NOW)
    assert admitted(verdict, west, bare1)
    assert verdict.held == {
        east.id: "rate region=east 1 per 1m reached",
        bare2.id: "rate (no region) 1 per 1m reached",
    }


def test_rate_asks_for_one_period_of_history() -> None:
    assert rate(per="500ms").lookback_seconds == 0.5
    assert rate(per="1h30m").lookback_seconds == 5400.0
    assert rate(per=2).lookback_seconds == 2.0


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"limit": 0, "per": "1s"}, "limit: Input should be greater than or equal to 1"),
        ({"per": "1s"}, "limit: Field required"),
        ({"limit": 1}, "per: Field required"),
        ({"limit": 1, "per": "0s"}, "per must be longer than 0"),
        ({"limit": 1, "per": "soon"}, "invalid duration 'soon'"),
        ({"limit": 1, "per": "-1s"}, "invalid duration"),
        ({"limit": 1, "per": "1s", "label": ""}, "label: String should have at least 1"),
        ({"limit": 1, "per": "1s", "burst": 2}, "burst: Extra inputs"),
    ],
)
def test_rate_settings_errors(options: dict[str, Any], message: str) -> None:
    with pytest.raises(PluginError, match=message):
        build(THROTTLERS, "rate", options)


# --- a simulated queue -------------------------------------------------------------------

Decide = Callable[[list[Job], RunningView, datetime], tuple[list[int], dict[int, str]]]


def single(throttler: Any) -> Decide:
    """Ask one throttler, checking that its verdict is well formed, pure and in queue order."""

    def decide(
        candidates: list[Job], seen: RunningView, now: datetime
    ) -> tuple[list[int], dict[int, str]]:
        verdict = throttler.decide(candidates, seen, now)
        assert throttler.decide(candidates, seen, now) == verdict  # same input, same reasons
        order = [j.id for j in candidates]
        assert verdict.admitted == [i for i in order if i in set(verdict.admitted)]
        assert not verdict.deferred
        assert sorted([*verdict.admitted, *verdict.held]) == sorted(order)
        assert all(isinstance(r, str) and r for r in verdict.held.values())
        return verdict.admitted, verdict.held

    return decide


def chain(stages: list[Stage]) -> Decide:
    def decide(
        candidates: list[Job], seen: RunningView, now: datetime
    ) -> tuple[list[int], dict[int, str]]:
        result = run_chain(stages, candidates, seen, now)
        assert not result.errors
        ids = [j.id for j in result.admitted]
        assert sorted([*ids, *result.held]) == sorted(j.id for j in candidates)
        return ids, result.held

    return decide


class Queue:
    """Waiting jobs in queue order, in-flight jobs and a start log, moved round by round."""

    def __init__(
        self, decide: Decide, lookback: timedelta = timedelta(0), full_history: bool = False
    ) -> None:
        self.decide = decide
        self.lookback = lookback
        self.full_history = full_history  # the loop gives *at least* the lookback
        self.now = NOW
        self.waiting: list[Job] = []
        self.running: dict[int, Job] = {}
        self.starts: list[tuple[datetime, Job]] = []

    def view(self) -> RunningView:
        since = self.now - self.lookback
        starts = [Start(at, j.labels) for at, j in self.starts if self.full_history or at >= since]
        return RunningView([flying(j) for j in self.running.values()], starts)

    def tick(self) -> tuple[list[Job], dict[int, str]]:
        ids, held = self.decide(list(self.waiting), self.view(), self.now)
        chosen = set(ids)
        admitted = [j for j in self.waiting if j.id in chosen]
        self.waiting = [j for j in self.waiting if j.id not in chosen]
        for j in admitted:
            self.running[j.id] = j
            self.starts.append((self.now, j))
        return admitted, held

    def play(self, round_: Round) -> None:
        """Jobs arrive, some in-flight jobs finish, the clock moves."""
        arrivals, finishes, wait_ms = round_
        for region, tenant, weight in arrivals:
            self.waiting.append(job(weight=weight, region=region, tenant=tenant))
        for pick in finishes:
            if self.running:
                del self.running[sorted(self.running)[pick % len(self.running)]]
        self.now += timedelta(milliseconds=wait_ms)

    def drain(self, check: Callable[[dict[int, Job], list[Job], dict[int, str]], None]) -> None:
        """Finish everything in flight and tick until no job waits: nobody starves."""
        for _ in range(len(self.waiting) + 1):
            if not self.waiting:
                return
            self.running.clear()
            self.now += max(self.lookback, timedelta(seconds=1))
            before = dict(self.running)
            admitted, held = self.tick()
            check(before, admitted, held)
            assert admitted, f"no progress with nothing in flight: {held}"
        assert not self.waiting, f"starved: {[j.labels for j in self.waiting]}"


Arrival = tuple[str | None, str | None, int]  # region, tenant, weight
Round = tuple[list[Arrival], list[int], int]  # arrivals, in-flight jobs to finish, ms to wait


def rounds(
    regions: Sequence[str | None],
    tenants: Sequence[str | None],
    weights: st.SearchStrategy[int],
    max_wait_ms: int = 1500,
) -> st.SearchStrategy[list[Round]]:
    """Rounds of a queue's life, each followed by a tick."""
    arrival = st.tuples(st.sampled_from(regions), st.sampled_from(tenants), weights)
    return st.lists(
        st.tuples(
            st.lists(arrival, max_size=6),
            st.lists(st.integers(0, 99), max_size=4),
            st.integers(0, max_wait_ms),
        ),
        max_size=25,
    )


def run(
    queue: Queue,
    plan: list[Round],
    check: Callable[[dict[int, Job], list[Job], dict[int, str]], None],
) -> None:
    for round_ in plan:
        queue.play(round_)
        before = dict(queue.running)
        admitted, held = queue.tick()
        check(before, admitted, held)
    queue.drain(check)


# --- share properties --------------------------------------------------------------------

SHARE_CONFIGS = [
    ({"east": 40, "north": 30, "west": 30}, 0),
    ({"east": 50, "north": 25}, 10),
    ({"east": 60}, 20),
    ({"east": 33.3, "north": 33.3}, 33.3),
]


@st.composite
def share_setups(draw: st.DrawFn, weight_one: bool = False) -> tuple[Shares, list[Round]]:
    shares, other = draw(st.sampled_from(SHARE_CONFIGS))
    lend = draw(st.booleans())
    capacity = draw(st.integers(10, 20))
    throttler = build(
        THROTTLERS, "share", {"label": "region", "shares": shares, "other": other, "lend": lend}
    )
    throttler.bind("default", capacity)
    regions: list[str | None] = list(shares)
    if other:
        regions += ["south", None]
    # Without lending a job heavier than its quota can never start; with lending, up to capacity.
    heaviest = 1 if weight_one else capacity if lend else min(throttler.quotas.values())
    # Mostly light jobs, so that shares fill, borrow and give back within a few rounds.
    weights = st.integers(1, min(3, heaviest)) | st.integers(1, heaviest)
    return throttler, draw(rounds(regions, [None], weights))


def share_checker(throttler: Shares, weight_one: bool) -> Callable[..., None]:
    quotas, capacity, lend = throttler.quotas, throttler.capacity, throttler.settings.lend
    assert capacity is not None

    def bucket(j: Job) -> Any:
        region = j.labels.get("region")
        return region if region in quotas else OTHER

    def used(running: dict[int, Job]) -> dict[Any, int]:
        return {b: sum(j.weight for j in running.values() if bucket(j) == b) for b in quotas}

    def check(
        before: dict[int, Job], admitted: list[Job], held: dict[int, str], queue: Queue
    ) -> None:
        after_used = used(queue.running)
        before_used = used(before)
        total = sum(j.weight for j in queue.running.values())
        assert total <= capacity
        if not lend:
            assert all(after_used[b] <= quotas[b] for b in quotas), after_used
        # Within a share, jobs start in queue order.
        for b in quotas:
            mine = [j for j in [*admitted, *queue.waiting] if bucket(j) == b]
            mine.sort(key=lambda j: j.id)
            starts = [j in admitted for j in mine]
            assert starts == sorted(starts, reverse=True), f"share {b} skipped a job"
        waiting_heads = {}
        for j in queue.waiting:
            waiting_heads.setdefault(bucket(j), j)
        if lend:
            # A share whose next job fits in its own quota is served before any borrower.
            owner_waits = any(
                after_used[b] + j.weight <= quotas[b] for b, j in waiting_heads.items()
            )
            if owner_waits:
                for b in quotas:
                    assert after_used[b] <= max(quotas[b], before_used[b]), (b, after_used)
        if weight_one and held:
            if lend:  # nothing is left idle while anyone waits
                assert total == capacity
            else:  # a share holds jobs only when it is full
                assert all(after_used[b] == quotas[b] for b in waiting_heads)

    return check


@PROPERTY
@given(share_setups())
def test_share_limits_hold_and_nobody_starves(setup: tuple[Shares, list[Round]]) -> None:
    throttler, actions = setup
    queue = Queue(single(throttler))
    check = share_checker(throttler, weight_one=False)
    run(queue, actions, lambda b, a, h: check(b, a, h, queue))


@PROPERTY
@given(share_setups(weight_one=True))
def test_share_leaves_no_capacity_idle_that_it_may_use(
    setup: tuple[Shares, list[Round]],
) -> None:
    throttler, actions = setup
    queue = Queue(single(throttler))
    check = share_checker(throttler, weight_one=True)
    run(queue, actions, lambda b, a, h: check(b, a, h, queue))


@PROPERTY
@given(rounds(["east", "north", "west"], [None], st.integers(1, 4), max_wait_ms=0))
def test_lent_capacity_goes_back_to_its_owners_first(plan: list[Round]) -> None:
    # A small, busy queue where shares keep borrowing and taking back (capacity 10: 4/3/3).
    throttler = share(lend=True)
    queue = Queue(single(throttler))
    check = share_checker(throttler, weight_one=False)
    run(queue, plan, lambda b, a, h: check(b, a, h, queue))


# --- per_key properties ------------------------------------------------------------------

TENANTS = ["acme", "beta", "gamma", None]


@PROPERTY
@given(
    limit=st.integers(1, 3),
    by_weight=st.booleans(),
    actions=rounds(["east"], TENANTS, st.integers(1, 3)),
)
def test_per_key_limits_hold_and_nobody_starves(
    limit: int, by_weight: bool, actions: list[Round]
) -> None:
    throttler = per_key(limit=limit, count="weight" if by_weight else "jobs")
    queue = Queue(single(throttler))

    def held_in(running: dict[int, Job]) -> Counter[str]:
        counts: Counter[str] = Counter()
        for j in running.values():
            if "tenant" in j.labels:
                counts[j.labels["tenant"]] += j.weight if by_weight else 1
        return counts

    def check(before: dict[int, Job], admitted: list[Job], held: dict[int, str]) -> None:
        counts = held_in(queue.running)
        assert all(n <= limit for n in counts.values()), counts
        heads: dict[str, Job] = {}
        for j in queue.waiting:
            tenant = j.labels.get("tenant")
            assert tenant is not None, "a job without the key was held"
            heads.setdefault(tenant, j)
        for tenant, j in heads.items():  # a key's next job waits only when it does not fit
            assert counts[tenant] + (j.weight if by_weight else 1) > limit
        for tenant in set(TENANTS) - {None}:
            mine = sorted(
                (
                    j
                    for j in [*admitted, *queue.waiting]
                    if j.labels.get("tenant") == tenant and (j.weight if by_weight else 1) <= limit
                ),
                key=lambda j: j.id,
            )
            starts = [j in admitted for j in mine]
            assert starts == sorted(starts, reverse=True), f"key {tenant} skipped a job"

    # Jobs heavier than the limit never start with count=weight; leave them out of the run.
    if by_weight:
        actions = [([a for a in arrivals if a[2] <= limit], *rest) for arrivals, *rest in actions]
    run(queue, actions, check)


# --- rate properties ---------------------------------------------------------------------


def assert_no_window_over(
    starts: list[tuple[datetime, Job]], limit: int, per: timedelta, key: Callable[[Job], Any]
) -> None:
    by_key: dict[Any, list[datetime]] = {}
    for at, j in starts:
        by_key.setdefault(key(j), []).append(at)
    for times in by_key.values():
        times.sort()
        for first, last in zip(times, times[limit:], strict=False):
            # limit + 1 starts within [first, first + per) would break the limit
            assert last - first >= per, (first, last)


@PROPERTY
@given(
    limit=st.integers(1, 4),
    per_ms=st.sampled_from([500, 1000, 2500]),
    by_label=st.booleans(),
    full_history=st.booleans(),
    actions=rounds(["east", "west", None], [None], st.integers(1, 3), max_wait_ms=1200),
)
def test_rate_limit_holds_in_every_window_and_nobody_starves(
    limit: int, per_ms: int, by_label: bool, full_history: bool, actions: list[Round]
) -> None:
    throttler = rate(limit=limit, per=f"{per_ms}ms", **({"label": "region"} if by_label else {}))
    per = timedelta(milliseconds=per_ms)
    assert throttler.lookback_seconds == per.total_seconds()
    queue = Queue(single(throttler), lookback=per, full_history=full_history)

    def key(j: Job) -> Any:
        return j.labels.get("region") if by_label else None

    def check(before: dict[int, Job], admitted: list[Job], held: dict[int, str]) -> None:
        assert_no_window_over(queue.starts, limit, per, key)
        recent = Counter(key(j) for at, j in queue.starts if at > queue.now - per)
        for j in queue.waiting:  # held only when its bucket used up the window
            assert recent[key(j)] == limit

    run(queue, actions, check)


# --- a chain: share, rate and per_key together -------------------------------------------


@PROPERTY
@given(
    lend=st.booleans(),
    rate_limit=st.integers(1, 5),
    per_key_limit=st.integers(1, 2),
    rate_by_region=st.booleans(),
    actions=rounds(["east", "north", "west"], TENANTS, st.integers(1, 3), max_wait_ms=800),
)
def test_chain_keeps_every_limit(
    lend: bool,
    rate_limit: int,
    per_key_limit: int,
    rate_by_region: bool,
    actions: list[Round],
) -> None:
    shares = share(capacity=None, lend=lend)
    shares.bind("default", 10)
    limiter = rate(limit=rate_limit, per="1s", **({"label": "region"} if rate_by_region else {}))
    series = per_key(limit=per_key_limit)
    stages = [
        Stage.of("share", shares),
        Stage.of("rate", limiter),
        Stage.of("per_key", series),
    ]
    queue = Queue(chain(stages), lookback=timedelta(seconds=1))

    def check(before: dict[int, Job], admitted: list[Job], held: dict[int, str]) -> None:
        running = list(queue.running.values())
        by_region = Counter({r: 0 for r in ("east", "north", "west")})
        for j in running:
            by_region[j.labels["region"]] += j.weight
        if lend:
            assert sum(by_region.values()) <= 10
        else:
            assert by_region["east"] <= 4 and by_region["north"] <= 3 and by_region["west"] <= 3
        tenants = Counter(j.labels["tenant"] for j in running if "tenant" in j.labels)
        assert all(n <= per_key_limit for n in tenants.values())
        assert_no_window_over(
            queue.starts,
            rate_limit,
            timedelta(seconds=1),
            lambda j: j.labels.get("region") if rate_by_region else None,
        )

    run(queue, actions, check)
