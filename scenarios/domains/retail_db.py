"""Record models of the retail DB (products, users, orders), in tau2's layout and field types.

Fields typed float here are always floats in the canonical dump (prices, amounts, balances).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field


class Variant(BaseModel):
    """One purchasable item of a product."""

    item_id: str
    """Unique item id."""
    options: dict[str, str]
    """Option name → value, e.g. color → blue."""
    available: bool
    """Whether it is in stock."""
    price: float
    """Unit price in dollars."""


class Product(BaseModel):
    """A product type with its variants."""

    name: str
    """Product name."""
    product_id: str
    """Unique product id."""
    variants: dict[str, Variant]
    """Variants by item id."""


class UserName(BaseModel):
    """A person's name."""

    first_name: str
    """Given name."""
    last_name: str
    """Family name."""


class UserAddress(BaseModel):
    """A postal address."""

    address1: str
    """First line."""
    address2: str
    """Second line (may be empty)."""
    city: str
    """City."""
    country: str
    """Country."""
    state: str
    """State or province."""
    zip: str
    """Postal code."""


class CreditCard(BaseModel):
    """A saved credit card."""

    source: Literal["credit_card"]
    """Always credit_card."""
    id: str
    """Payment method id."""
    brand: str
    """Card brand."""
    last_four: str
    """Last four digits."""


class Paypal(BaseModel):
    """A saved PayPal account."""

    source: Literal["paypal"]
    """Always paypal."""
    id: str
    """Payment method id."""


class GiftCard(BaseModel):
    """A gift card with a balance."""

    source: Literal["gift_card"]
    """Always gift_card."""
    id: str
    """Payment method id."""
    balance: float
    """Remaining balance in dollars."""


PaymentMethod = Annotated[CreditCard | Paypal | GiftCard, Field(discriminator="source")]


class User(BaseModel):
    """A customer."""

    user_id: str
    """Unique user id."""
    name: UserName
    """Full name."""
    address: UserAddress
    """Default address."""
    email: str
    """Email address."""
    payment_methods: dict[str, PaymentMethod]
    """Saved payment methods by id."""
    orders: list[str]
    """Order ids, oldest first."""


class OrderFulfillment(BaseModel):
    """A shipment of some of an order's items."""

    tracking_id: list[str]
    """Tracking numbers."""
    item_ids: list[str]
    """Items in the shipment."""


class OrderItem(BaseModel):
    """An item as bought in an order."""

    name: str
    """Product name."""
    product_id: str
    """Product id."""
    item_id: str
    """Item (variant) id."""
    price: float
    """Price paid."""
    options: dict[str, str]
    """Options of the item."""


class OrderPayment(BaseModel):
    """A payment or refund on an order."""

    transaction_type: Literal["payment", "refund"]
    """payment or refund."""
    amount: float
    """Amount in dollars."""
    payment_method_id: str
    """Payment method charged or credited."""


OrderStatus = Literal[
    "processed",
    "pending",
    "pending (item modified)",
    "delivered",
    "cancelled",
    "exchange requested",
    "return requested",
]


class Order(BaseModel):
    """A customer order."""

    order_id: str
    """Unique order id, `#W` and seven digits."""
    user_id: str
    """Customer id."""
    address: UserAddress
    """Shipping address."""
    items: list[OrderItem]
    """Items bought."""
    status: OrderStatus
    """Order status."""
    fulfillments: list[OrderFulfillment]
    """Shipments."""
    payment_history: list[OrderPayment]
    """Payments and refunds, in order."""
    cancel_reason: Literal["no longer needed", "ordered by mistake"] | None = None
    """Why the order was cancelled."""
    exchange_items: list[str] | None = None
    """Items to exchange."""
    exchange_new_items: list[str] | None = None
    """Items to exchange them for."""
    exchange_payment_method_id: str | None = None
    """Payment method for the exchange price difference."""
    exchange_price_difference: float | None = None
    """Price difference of the exchange."""
    return_items: list[str] | None = None
    """Items to return."""
    return_payment_method_id: str | None = None
    """Payment method that receives the refund."""


class RetailDB(BaseModel):
    """The retail DB."""

    model_config = ConfigDict(extra="forbid")

    products: dict[str, Product]
    """Products by id."""
    users: dict[str, User]
    """Users by id."""
    orders: dict[str, Order]
    """Orders by id."""


TABLES: dict[str, type[BaseModel]] = {"products": Product, "users": User, "orders": Order}
