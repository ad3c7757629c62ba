"""Recurring jobs: schedules (cron, time zone, job template) and the scheduler that fires them."""

from hipq.schedules.cron import Cron, ScheduleError
from hipq.schedules.definition import Plan, Schedule, build_schedule, job_fields, plan
from hipq.schedules.scheduler import Scheduler

__all__ = [
    "Cron",
    "Plan",
    "Schedule",
    "ScheduleError",
    "Scheduler",
    "build_schedule",
    "job_fields",
    "plan",
]
