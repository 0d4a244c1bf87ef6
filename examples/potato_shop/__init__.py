"""The potato shop: a complete set of categories, used by `frontdesk demo` and the docs.

    ORDERS        buy potatoes (variety, bags 1-50), with a confirm step
    ORDER_STATUS  where is order N
    REFUND        refund the delivery fee of a late order

Orders live in the conversation database through the handler store, so any process can
carry a conversation on.
"""

from frontdesk.examples.potato_shop.shop import (
    ORDER_STATUS,
    ORDERS,
    REFUND,
    OrderRequest,
    OrderStatusRequest,
    RefundRequest,
    build,
    categories,
    profile,
)

__all__ = [
    "ORDERS",
    "ORDER_STATUS",
    "REFUND",
    "OrderRequest",
    "OrderStatusRequest",
    "RefundRequest",
    "build",
    "categories",
    "profile",
]
