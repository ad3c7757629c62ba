"""`hipq batches add` and `hipq batches show` against hipq serve, and their refusals as
one readable line."""

from __future__ import annotations

from tests.test_cli import JOB_TYPES, Server, hipq, job_state, server, wait_for  # noqa: F401


def test_batches_add_and_show(server: Server) -> None:  # noqa: F811
    url = ["--url", server.url]
    jobs = '[{"type": "ok", "payload": {"n": 1}}, {"type": "ok", "payload": {"n": 2}}]'
    added = hipq("batches", "add", jobs, "--on-complete", "ok", "--payload", '{"r": 1}', *url)
    body = added.json()
    assert len(body["jobs"]) == 2
    shown = hipq("batches", "show", str(body["batch_id"]), *url).json()
    assert shown["total"] == 2 and shown["on_complete"] == "ok"
    wait_for(lambda: job_state(server, shown["completion_job_id"]) == "completed", 60, "done")
    shown = hipq("batches", "show", str(body["batch_id"]), *url).json()
    assert (shown["pending"], shown["completed"]) == (0, 2)

    assert "batch 99999 does not exist" in hipq("batches", "show", "99999", *url).one_error_line()
    assert "JOBS is not valid JSON" in hipq("batches", "add", "[{", *url).one_error_line()
    unknown = hipq("batches", "add", '[{"type": "ok"}]', "--on-complete", "nope", *url)
    assert "batch.on_complete.type" in unknown.one_error_line()


def test_batches_create_join_seal_and_list(server: Server) -> None:  # noqa: F811
    url = ["--url", server.url]
    made = hipq("batches", "create", "--on-complete", "ok", *url).json()
    assert (made["status"], made["total"]) == ("open", 0)
    batch_id = str(made["id"])
    job = hipq("jobs", "add", "ok", "--batch", batch_id, *url).json()
    assert job["batch_id"] == made["id"]
    joined = hipq("batches", "add", '[{"type": "ok"}]', "--batch", batch_id, *url).json()
    assert joined["batch_id"] == made["id"] and len(joined["jobs"]) == 1
    sealed = hipq("batches", "seal", batch_id, *url).json()
    assert sealed["total"] == 2 and sealed["sealed_at"] is not None
    wait_for(lambda: job_state(server, made["completion_job_id"]) == "completed", 60, "done")
    listed = hipq("batches", "list", "--json", *url).json()
    assert listed["batches"][0]["id"] == made["id"]
    assert listed["batches"][0]["status"] == "finished"
    # Without --json, a table as `hipq jobs list` prints: a header and one row a batch.
    table = hipq("batches", "list", *url).out.splitlines()
    assert table[0].split()[:3] == ["ID", "STATUS", "TOTAL"]
    assert table[1].split()[:6] == [batch_id, "finished", "2", "0", "2", "0"]
    members = hipq("batches", "jobs", batch_id, "--limit", "1", *url).json()
    assert [j["id"] for j in members["jobs"]] == [joined["jobs"][0]["id"]]
    rest = hipq("batches", "jobs", batch_id, "--cursor", members["next_cursor"], *url).json()
    assert [j["id"] for j in rest["jobs"]] == [job["id"]]

    late = hipq("jobs", "add", "ok", "--batch", batch_id, *url).one_error_line()
    assert "batch_id" in late and "finished at" in late
    assert "does not exist" in hipq("jobs", "add", "ok", "--batch", "99999", *url).one_error_line()
    assert "does not exist" in hipq("batches", "seal", "99999", *url).one_error_line()
