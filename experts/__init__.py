"""The experts (triage, request, response, summariser) and the categories they route to."""

from frontdesk.experts._call import ExpertCall
from frontdesk.experts.category import Category, HandlerContext, NeedMoreInfo, Outcome

__all__ = ["Category", "ExpertCall", "HandlerContext", "NeedMoreInfo", "Outcome"]
