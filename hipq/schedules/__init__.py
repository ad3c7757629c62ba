"""Recurring jobs: schedules (cron, time zone, job template) and their fire times; the
scheduler that fires them is ``hipq.process.scheduler``."""

from hipq.schedules.cron import Cron, ScheduleError
from hipq.schedules.definition import Plan, Schedule, build_schedule, job_fields, plan

__all__ = [
    "Cron",
    "Plan",
    "Schedule",
    "ScheduleError",
    "build_schedule",
    "job_fields",
    "plan",
]
