from tests.support import FakeClock, make_settings
from hipq.intake import Intake
from hipq.plugins import RetryStrategies


async def test_insert_and_get_round_trip(store, database_url):
    clock = FakeClock()
    intake = Intake(make_settings(database_url), RetryStrategies())
    new = intake.resolve({"type": "ok", "payload": {"n": 1}, "labels": {"region": "east"}}, clock())
    [job] = (await store.job_insert_many([new], clock())).jobs
    again = await store.job_get(job.id)
    assert again == job
