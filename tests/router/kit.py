"""Shared pieces for the router tests: one cached MiniLM (never mutate it: SVF tests load their own),
synthetic prompts on three topics, and workers described by topic."""

from __future__ import annotations

import functools
import os

from fugu_cli.router.backbone import Backbone, load_backbone
from fugu_cli.types import Message, Worker

_TEMPLATES = ("Help me {}.", "Can you {}?", "I need to {} today.", "Please {} and explain why.")
TOPICS: dict[str, tuple[str, ...]] = {
    "sql": (
        "write a SQL query joining the orders and customers tables",
        "add an index to the Postgres users table",
        "speed up a slow SELECT with GROUP BY",
        "design a database schema for invoices",
        "migrate the MySQL table to add a column",
        "debug a deadlock in a database transaction",
    ),
    "web": (
        "center a div with CSS flexbox",
        "fix the React component that re-renders too often",
        "style the HTML button with Tailwind classes",
        "make the web page layout responsive on phones",
        "debug the JavaScript click handler in the browser",
        "animate the navbar with CSS transitions",
    ),
    "shell": (
        "write a bash script that renames files in a folder",
        "fix the shell loop that reads lines from a file",
        "set up a cron job on the Linux server",
        "use grep and sed to edit the config files",
        "kill the process listening on port 8080 from the terminal",
        "chmod the scripts directory recursively",
    ),
}
DESCRIPTIONS = {
    "sql": "Database specialist: SQL queries, schemas, indexes, Postgres and MySQL.",
    "web": "Frontend specialist: HTML, CSS, JavaScript, React and browser user interfaces.",
    "shell": "Unix shell specialist: bash scripts, the Linux command line, grep, sed, cron and processes.",
}


def prompts(topic: str) -> list[str]:
    return [t.format(s) for s in TOPICS[topic] for t in _TEMPLATES]


def worker(topic: str, *, price_in: float | None = None, price_out: float | None = None) -> Worker:
    return Worker(
        name=f"{topic}-pro",
        model=f"openai/{topic}-model",
        description=DESCRIPTIONS[topic],
        price_in=price_in,
        price_out=price_out,
    )


def user(text: str) -> list[Message]:
    return [Message(role="user", content=text)]


@functools.cache
def minilm() -> Backbone:
    os.environ["HF_HUB_OFFLINE"] = "1"
    return load_backbone("minilm", threads=1)  # 2 OpenMP threads spin badly on a busy CI box
