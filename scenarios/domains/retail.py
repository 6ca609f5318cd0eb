"""The retail domain: look up users, orders and products; cancel, modify, return and exchange orders.

Semantics and error messages follow tau2-bench's retail tools, including the upstream bug in
modify_pending_order_items (see data/NOTICE.md).
"""

from __future__ import annotations

import json
from typing import Any

from scenarios.domains.common import fold, parse_model, require_list
from scenarios.domains.environment import DomainEnvironment, GenericTools, domain_tool
from scenarios.domains.retail_db import TABLES, RetailDB, UserAddress
from tools.errors import ToolError

CANCEL_REASONS = ("no longer needed", "ordered by mistake")


class RetailEnvironment(GenericTools, DomainEnvironment):
    """Retail domain: an online store's customer-service back office."""

    name = "retail"
    db_model = RetailDB
    tables = TABLES

    # ----- lookups -----------------------------------------------------------------------

    def _order(self, order_id: Any) -> dict[str, Any]:
        orders = self.store.table("orders")
        if not isinstance(order_id, str) or order_id not in orders:
            raise ToolError("Order not found")
        return orders[order_id]

    def _user(self, user_id: Any) -> dict[str, Any]:
        users = self.store.table("users")
        if not isinstance(user_id, str) or user_id not in users:
            raise ToolError("User not found")
        return users[user_id]

    def _product(self, product_id: Any) -> dict[str, Any]:
        products = self.store.table("products")
        if not isinstance(product_id, str) or product_id not in products:
            raise ToolError("Product not found")
        return products[product_id]

    def _variant(self, product_id: str, item_id: Any) -> dict[str, Any]:
        variants = self._product(product_id)["variants"]
        if not isinstance(item_id, str) or item_id not in variants:
            raise ToolError("Variant not found")
        return variants[item_id]

    def _payment_method(self, user_id: str, payment_method_id: Any) -> dict[str, Any]:
        methods = self._user(user_id)["payment_methods"]
        if not isinstance(payment_method_id, str) or payment_method_id not in methods:
            raise ToolError("Payment method not found")
        return methods[payment_method_id]

    def _add_to_gift_card(self, user_id: str, payment_method_id: str, delta: float) -> None:
        card = self.store.writable("users", user_id)["payment_methods"][payment_method_id]
        card["balance"] = round(card["balance"] + delta, 2)

    @staticmethod
    def _check_items_exist(order: dict[str, Any], item_ids: list[Any], message: str) -> None:
        in_order = [item["item_id"] for item in order["items"]]
        for item_id in item_ids:
            if item_ids.count(item_id) > in_order.count(item_id):
                raise ToolError(message.format(item_id=item_id))

    # ----- read tools --------------------------------------------------------------------

    @domain_tool()
    def find_user_id_by_name_zip(self, first_name: str, last_name: str, zip: str) -> str:
        """Find a user id by first name, last name and zip code (names match case- and accent-insensitively)."""
        if not all(isinstance(v, str) for v in (first_name, last_name, zip)):
            raise ToolError("User not found")
        first, last = fold(first_name), fold(last_name)
        for user_id, user in self.store.table("users").items():
            name = user["name"]
            if (
                fold(name["first_name"]) == first
                and fold(name["last_name"]) == last
                and user["address"]["zip"] == zip
            ):
                return user_id
        raise ToolError("User not found")

    @domain_tool()
    def find_user_id_by_email(self, email: str) -> str:
        """Find a user id by email (case- and accent-insensitive)."""
        if isinstance(email, str):
            wanted = fold(email)
            for user_id, user in self.store.table("users").items():
                if fold(user["email"]) == wanted:
                    return user_id
        raise ToolError("User not found")

    @domain_tool()
    def get_order_details(self, order_id: str) -> dict[str, Any]:
        """Get the status and details of an order."""
        return self._order(order_id)

    @domain_tool()
    def get_product_details(self, product_id: str) -> dict[str, Any]:
        """Get the inventory details of a product."""
        return self._product(product_id)

    @domain_tool()
    def get_item_details(self, item_id: str) -> dict[str, Any]:
        """Get the inventory details of an item."""
        if isinstance(item_id, str):
            for product in self.store.table("products").values():
                if item_id in product["variants"]:
                    return product["variants"][item_id]
        raise ToolError("Item not found")

    @domain_tool()
    def get_user_details(self, user_id: str) -> dict[str, Any]:
        """Get the details of a user, including their orders."""
        return self._user(user_id)

    @domain_tool()
    def list_all_product_types(self) -> str:
        """Product name → product id for all products, as JSON text sorted by name."""
        names = {p["name"]: p["product_id"] for p in self.store.table("products").values()}
        return json.dumps(names, sort_keys=True)

    # ----- write tools -------------------------------------------------------------------

    @domain_tool()
    def cancel_pending_order(self, order_id: str, reason: str) -> dict[str, Any]:
        """Cancel a pending order; gift-card payments are refunded immediately."""
        order = self._order(order_id)
        if order["status"] != "pending":
            raise ToolError("Non-pending order cannot be cancelled")
        if reason not in CANCEL_REASONS:
            raise ToolError("Invalid reason")
        refunds = []
        for payment in order["payment_history"]:
            method_id = payment["payment_method_id"]
            refunds.append(
                {
                    "transaction_type": "refund",
                    "amount": payment["amount"],
                    "payment_method_id": method_id,
                }
            )
            # Looked up per payment like tau2, so a missing method fails after earlier credits.
            method = self._payment_method(order["user_id"], method_id)
            if method["source"] == "gift_card":
                self._add_to_gift_card(order["user_id"], method_id, payment["amount"])
        order = self.store.writable("orders", order_id)
        order["status"] = "cancelled"
        order["cancel_reason"] = reason
        order["payment_history"].extend(refunds)
        return order

    @domain_tool()
    def exchange_delivered_order_items(
        self, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str
    ) -> dict[str, Any]:
        """Request an exchange of delivered items for other items of the same products."""
        order = self._order(order_id)
        if order["status"] != "delivered":
            raise ToolError("Non-delivered order cannot be exchanged")
        item_ids = require_list(item_ids, "item_ids")
        new_item_ids = require_list(new_item_ids, "new_item_ids")
        self._check_items_exist(order, item_ids, "Number of {item_id} not found.")
        if len(item_ids) != len(new_item_ids):
            raise ToolError("The number of items to be exchanged should match.")
        diff = 0.0
        for item_id, new_item_id in zip(item_ids, new_item_ids, strict=True):
            item = next((i for i in order["items"] if i["item_id"] == item_id), None)
            if item is None:
                raise ToolError(f"Item {item_id} not found")
            variant = self._variant(item["product_id"], new_item_id)
            if not variant["available"]:
                raise ToolError(f"New item {new_item_id} not found or available")
            diff += variant["price"] - item["price"]
        diff = round(diff, 2)
        method = self._payment_method(order["user_id"], payment_method_id)
        if method["source"] == "gift_card" and method["balance"] < diff:
            raise ToolError("Insufficient gift card balance to pay for the price difference")
        order = self.store.writable("orders", order_id)
        order["status"] = "exchange requested"
        order["exchange_items"] = sorted(item_ids)
        order["exchange_new_items"] = sorted(new_item_ids)
        order["exchange_payment_method_id"] = payment_method_id
        order["exchange_price_difference"] = float(diff)
        return order

    @domain_tool()
    def modify_pending_order_address(
        self,
        order_id: str,
        address1: str,
        address2: str,
        city: str,
        state: str,
        country: str,
        zip: str,
    ) -> dict[str, Any]:
        """Change the shipping address of a pending order."""
        order = self._order(order_id)
        if "pending" not in order["status"]:
            raise ToolError("Non-pending order cannot be modified")
        address = _address(address1, address2, city, state, country, zip)
        order = self.store.writable("orders", order_id)
        order["address"] = address
        return order

    @domain_tool()
    def modify_pending_order_items(
        self, order_id: str, item_ids: list[str], new_item_ids: list[str], payment_method_id: str
    ) -> dict[str, Any]:
        """Swap items of a pending order for other items of the same products (once per order)."""
        order = self._order(order_id)
        if order["status"] != "pending":
            raise ToolError("Non-pending order cannot be modified")
        item_ids = require_list(item_ids, "item_ids")
        new_item_ids = require_list(new_item_ids, "new_item_ids")
        self._check_items_exist(order, item_ids, "{item_id} not found")
        if len(item_ids) != len(new_item_ids):
            raise ToolError("The number of items to be exchanged should match")
        diff = 0.0
        variant: dict[str, Any] | None = None
        for item_id, new_item_id in zip(item_ids, new_item_ids, strict=True):
            if item_id == new_item_id:
                raise ToolError("The new item id should be different from the old item id")
            item = next((i for i in order["items"] if i["item_id"] == item_id), None)
            if item is None:
                raise ToolError(f"Item {item_id} not found")
            variant = self._variant(item["product_id"], new_item_id)
            if not variant["available"]:
                raise ToolError(f"New item {new_item_id} not found or available")
            diff += variant["price"] - item["price"]
        method = self._payment_method(order["user_id"], payment_method_id)
        if method["source"] == "gift_card" and method["balance"] < diff:
            raise ToolError("Insufficient gift card balance to pay for the new item")
        order = self.store.writable("orders", order_id)
        order["payment_history"].append(
            {
                "transaction_type": "payment" if diff > 0 else "refund",
                "amount": float(abs(diff)),
                "payment_method_id": payment_method_id,
            }
        )
        if method["source"] == "gift_card":
            self._add_to_gift_card(order["user_id"], payment_method_id, -diff)
        # Upstream bug kept on purpose: every item takes the LAST new variant's price and options.
        for item_id, new_item_id in zip(item_ids, new_item_ids, strict=True):
            item = next(i for i in order["items"] if i["item_id"] == item_id)
            item["item_id"] = new_item_id
            if variant is not None:
                item["price"] = variant["price"]
                item["options"] = dict(variant["options"])
        order["status"] = "pending (item modified)"
        return order

    @domain_tool()
    def modify_pending_order_payment(self, order_id: str, payment_method_id: str) -> dict[str, Any]:
        """Pay a pending order with another saved payment method."""
        order = self._order(order_id)
        if "pending" not in order["status"]:
            raise ToolError("Non-pending order cannot be modified")
        method = self._payment_method(order["user_id"], payment_method_id)
        history = order["payment_history"]
        if len(history) != 1 or history[0]["transaction_type"] != "payment":
            raise ToolError("There should be exactly one payment for a pending order")
        old_id = history[0]["payment_method_id"]
        if old_id == payment_method_id:
            raise ToolError("The new payment method should be different from the current one")
        amount = history[0]["amount"]
        if method["source"] == "gift_card" and method["balance"] < amount:
            raise ToolError("Insufficient gift card balance to pay for the order")
        order = self.store.writable("orders", order_id)
        order["payment_history"].extend(
            [
                {
                    "transaction_type": "payment",
                    "amount": amount,
                    "payment_method_id": payment_method_id,
                },
                {"transaction_type": "refund", "amount": amount, "payment_method_id": old_id},
            ]
        )
        if method["source"] == "gift_card":
            self._add_to_gift_card(order["user_id"], payment_method_id, -amount)
        old_method = self._payment_method(order["user_id"], old_id)
        if old_method["source"] == "gift_card":
            self._add_to_gift_card(order["user_id"], old_id, amount)
        return order

    @domain_tool()
    def modify_user_address(
        self,
        user_id: str,
        address1: str,
        address2: str,
        city: str,
        state: str,
        country: str,
        zip: str,
    ) -> dict[str, Any]:
        """Change a user's default address."""
        self._user(user_id)
        address = _address(address1, address2, city, state, country, zip)
        user = self.store.writable("users", user_id)
        user["address"] = address
        return user

    @domain_tool()
    def return_delivered_order_items(
        self, order_id: str, item_ids: list[str], payment_method_id: str
    ) -> dict[str, Any]:
        """Request a return of delivered items, refunded to the original method or a gift card."""
        order = self._order(order_id)
        if order["status"] != "delivered":
            raise ToolError("Non-delivered order cannot be returned")
        method = self._payment_method(self._user(order["user_id"])["user_id"], payment_method_id)
        if (
            method["source"] != "gift_card"
            and payment_method_id != order["payment_history"][0]["payment_method_id"]
        ):
            raise ToolError("Payment method should be the original payment method")
        item_ids = require_list(item_ids, "item_ids")
        self._check_items_exist(order, item_ids, "Some item not found")
        order = self.store.writable("orders", order_id)
        order["status"] = "return requested"
        order["return_items"] = sorted(item_ids)
        order["return_payment_method_id"] = payment_method_id
        return order


def _address(
    address1: Any, address2: Any, city: Any, state: Any, country: Any, zip: Any
) -> dict[str, Any]:
    fields = {
        "address1": address1,
        "address2": address2,
        "city": city,
        "state": state,
        "country": country,
        "zip": zip,
    }
    return parse_model(UserAddress, fields, "address").model_dump(mode="json")
