"""`hipq jobs add --after`: a job that waits for jobs from the command line, and its
refusals as one readable line."""

from __future__ import annotations

from tests.test_cli import Server, api_post, hipq, server, wait_state  # noqa: F401


def test_jobs_add_after_waits_and_refuses_unknown_jobs(server: Server) -> None:  # noqa: F811
    url = ["--url", server.url]
    first = api_post(server, "/v1/jobs", {"type": "ok", "job_key": "cli-first", "run_in": "1h"})
    added = hipq("jobs", "add", "ok", "--after", "cli-first", "--after-failed", "run", *url)
    job = added.json()
    assert job["after"] == [first["id"]] and job["after_failed"] == "run"
    assert job["state"] == "scheduled" and job["waiting_for"] == 1
    api_post(server, f"/v1/jobs/{first['id']}/cancel", {})
    wait_state(server, job["id"], "completed")  # runs anyway: --after-failed run

    unknown = hipq("jobs", "add", "ok", "--after", "987654321", *url)
    assert "after[0]: job 987654321 does not exist" in unknown.one_error_line()
    bad = hipq("jobs", "add", "ok", "--after", "1", "--after-failed", "maybe", *url)
    assert "after_failed" in bad.one_error_line()
