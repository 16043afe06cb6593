"""What the console reads of chains (docs/seeds.md §000 stages, §004 the chain's deadline): the
chain of one call, for its detail, and the chains, newest first, for the Chains screen (8).
queries/views/chain.sql and chains.sql; the rules that tell the story are console/core/chains.py."""

from __future__ import annotations

import uuid
from datetime import datetime

from console.core.chains import Chain, ChainStage
from console.core.models import CallDetail
from console.db import reads
from console.db.connect import Conn, run

# the Chains screen reads this many chains (newest first) per fetch
CHAINS_LIMIT = 200


def chain_of(conn: Conn, job_id: uuid.UUID) -> Chain | None:
    """Every call of the chain `job_id` belongs to, in stage order; None if there is no such call."""
    rows = run(conn, "views/chain", job_id=job_id)
    if not rows:
        return None
    return Chain(chain_id=rows[0]["chain_id"], calls=rows[0]["calls"], db_now=rows[0]["db_now"],
                 stages=[ChainStage.model_validate(r) for r in rows])


def chains(conn: Conn, *, include_lone: bool = False, limit: int = CHAINS_LIMIT) -> tuple[list[Chain], datetime]:
    """The chains, newest first (with `include_lone`, the calls that made no later call too), and
    the database's clock they were read at."""
    rows = run(conn, "views/chains", include_lone=include_lone, limit=limit)
    found = [Chain.model_validate(r) for r in rows]
    return found, (rows[0]["db_now"] if rows else reads.db_info(conn).db_now)


def call_detail_with_chain(conn: Conn, job_id: uuid.UUID) -> tuple[CallDetail, Chain | None]:
    """The call detail (reads.call_detail, its own snapshot) and the call's chain, read just after."""
    detail = reads.call_detail(conn, job_id)
    return detail, (chain_of(conn, job_id) if detail.job is not None else None)
