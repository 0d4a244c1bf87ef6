"""The card desk: a bank's small second assistant, served beside the potato shop on one
deployment (docs/profiles.md).

    BLOCK_CARD    block a lost or stolen card (the last four digits), once per card

`desks` builds both businesses on one `Orchestrator`, as `profiles`.
"""

from frontdesk.examples.card_desk.desk import (
    BLOCK_CARD,
    BlockCardRequest,
    categories,
    desks,
    profile,
)

__all__ = ["BLOCK_CARD", "BlockCardRequest", "categories", "desks", "profile"]
