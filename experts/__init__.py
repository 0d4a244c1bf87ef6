"""The experts (triage, request, response, summariser) and the categories they route to."""

from frontdesk.experts._call import CallObserver, ExpertCall, MemoryBlock
from frontdesk.experts.category import Category, HandlerContext, NeedMoreInfo, Outcome

__all__ = [
    "CallObserver",
    "Category",
    "ExpertCall",
    "HandlerContext",
    "MemoryBlock",
    "NeedMoreInfo",
    "Outcome",
]
