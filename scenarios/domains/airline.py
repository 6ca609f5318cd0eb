"""The airline domain: search flights, book, change and cancel reservations, send certificates.

Semantics and error messages follow tau2-bench's airline tools, including their quirks: booking
takes seats but cancelling does not give them back, and flight changes do not touch seat counts.
"""

from __future__ import annotations

from typing import Any

from pydantic import TypeAdapter, ValidationError

from scenarios.domains.airline_db import (
    TABLES,
    CabinClass,
    Certificate,
    FlightDB,
    FlightInfo,
    FlightType,
    Insurance,
    Passenger,
    Payment,
    Reservation,
)
from scenarios.domains.common import (
    describe,
    parse_model,
    require_list,
    resolve_key,
)
from scenarios.domains.environment import (
    DomainEnvironment,
    GenericTools,
    domain_tool,
    validate_record,
)
from tools.errors import ToolError

NEW_RESERVATION_IDS = ("HATHAT", "HATHAU", "HATHAV")
NEW_CERTIFICATE_IDS = ("certificate_3221322", "certificate_3221323", "certificate_3221324")
BOOKING_TIME = "2024-05-15T15:00:00"
AIRPORTS = (
    ("SFO", "San Francisco"), ("JFK", "New York"), ("LAX", "Los Angeles"), ("ORD", "Chicago"),
    ("DFW", "Dallas"), ("DEN", "Denver"), ("SEA", "Seattle"), ("ATL", "Atlanta"), ("MIA", "Miami"),
    ("BOS", "Boston"), ("PHX", "Phoenix"), ("IAH", "Houston"), ("LAS", "Las Vegas"), ("MCO", "Orlando"),
    ("EWR", "Newark"), ("CLT", "Charlotte"), ("MSP", "Minneapolis"), ("DTW", "Detroit"),
    ("PHL", "Philadelphia"), ("LGA", "LaGuardia"),
)  # fmt: skip
_CABIN = TypeAdapter(CabinClass)
_INT = TypeAdapter(int)


class AirlineEnvironment(GenericTools, DomainEnvironment):
    """Airline domain: a flight reservation desk."""

    name = "airline"
    db_model = FlightDB
    tables = TABLES

    # ----- lookups (case-, accent- and whitespace-tolerant, like tau2) ---------------------

    def _key(self, table: str, wanted: Any, label: str) -> str:
        records = self.store.table(table)
        key = resolve_key(records, wanted, records)
        if key is None:
            raise ToolError(f"{label} {wanted} not found")
        return key

    def _user_id(self, user_id: Any) -> str:
        return self._key("users", user_id, "User")

    def _reservation_id(self, reservation_id: Any) -> str:
        return self._key("reservations", reservation_id, "Reservation")

    def _flight(self, flight_number: Any) -> dict[str, Any]:
        return self.store.table("flights")[self._key("flights", flight_number, "Flight")]

    def _flight_date(self, flight_number: Any, date: Any) -> dict[str, Any]:
        dates = self._flight(flight_number)["dates"]
        if not isinstance(date, str) or date not in dates:
            raise ToolError(f"Flight {flight_number} not found on date {date}")
        return dates[date]

    def _search_direct(
        self, date: Any, origin: Any = None, destination: Any = None, leave_after: str | None = None
    ) -> list[dict[str, Any]]:
        results = []
        for flight in self.store.table("flights").values():
            status = flight["dates"].get(date) if isinstance(date, str) else None
            if (
                (origin is None or flight["origin"] == origin)
                and (destination is None or flight["destination"] == destination)
                and status is not None
                and status["status"] == "available"
                and (leave_after is None or flight["scheduled_departure_time_est"] >= leave_after)
            ):
                results.append(
                    {
                        "flight_number": flight["flight_number"],
                        "origin": flight["origin"],
                        "destination": flight["destination"],
                        "status": "available",
                        "scheduled_departure_time_est": flight["scheduled_departure_time_est"],
                        "scheduled_arrival_time_est": flight["scheduled_arrival_time_est"],
                        "date": None,
                        "available_seats": dict(status["available_seats"]),
                        "prices": dict(status["prices"]),
                    }
                )
        return results

    def _charge_for_update(
        self, user_id: str, payment_id: Any, total: int
    ) -> dict[str, Any] | None:
        """Check and charge an extra cost (or credit a negative one) for a reservation change."""
        methods = self.store.table("users")[user_id]["payment_methods"]
        if not isinstance(payment_id, str) or payment_id not in methods:
            raise ToolError("Payment method not found")
        method = methods[payment_id]
        if method["source"] == "certificate":
            raise ToolError("Certificate cannot be used to update reservation")
        if method["source"] == "gift_card" and method["amount"] < total:
            raise ToolError("Gift card balance is not enough")
        if method["source"] == "gift_card":
            card = self.store.writable("users", user_id)["payment_methods"][payment_id]
            card["amount"] = card["amount"] - total
        return {"payment_id": payment_id, "amount": total} if total != 0 else None

    # ----- read tools --------------------------------------------------------------------

    @domain_tool()
    def get_reservation_details(self, reservation_id: str) -> dict[str, Any]:
        """Get the details of a reservation."""
        return self.store.table("reservations")[self._reservation_id(reservation_id)]

    @domain_tool()
    def get_user_details(self, user_id: str) -> dict[str, Any]:
        """Get the details of a user, including their reservations."""
        return self.store.table("users")[self._user_id(user_id)]

    @domain_tool()
    def list_all_airports(self) -> list[dict[str, str]]:
        """All airports with their cities."""
        return [{"iata": code, "city": city} for code, city in AIRPORTS]

    @domain_tool()
    def search_direct_flight(
        self, origin: str, destination: str, date: str
    ) -> list[dict[str, Any]]:
        """Bookable direct flights between two airports on a date."""
        return self._search_direct(date, origin=origin, destination=destination)

    @domain_tool()
    def search_onestop_flight(
        self, origin: str, destination: str, date: str
    ) -> list[list[dict[str, Any]]]:
        """Bookable one-stop connections between two airports on a date."""
        results = []
        for first in self._search_direct(date, origin=origin):
            first["date"] = date
            # tau2 builds the next day without zero padding; kept for identical results.
            second_date = (
                f"2024-05-{int(date[-2:]) + 1}"
                if "+1" in first["scheduled_arrival_time_est"]
                else date
            )
            for second in self._search_direct(
                second_date,
                origin=first["destination"],
                destination=destination,
                leave_after=first["scheduled_arrival_time_est"],
            ):
                second["date"] = second_date
                results.append([first, second])
        return results

    @domain_tool()
    def get_flight_status(self, flight_number: str, date: str) -> str:
        """Status of a flight on a date."""
        return self._flight_date(flight_number, date)["status"]

    # ----- write tools -------------------------------------------------------------------

    @domain_tool()
    def book_reservation(
        self,
        user_id: str,
        origin: str,
        destination: str,
        flight_type: FlightType,
        cabin: CabinClass,
        flights: list[dict[str, Any]],
        passengers: list[dict[str, Any]],
        payment_methods: list[dict[str, Any]],
        total_baggages: int,
        nonfree_baggages: int,
        insurance: Insurance,
    ) -> dict[str, Any]:
        """Book a reservation: takes seats on every flight and charges the given payment methods."""
        infos = [parse_model(FlightInfo, f, "flight") for f in require_list(flights, "flights")]
        people = [
            parse_model(Passenger, p, "passenger") for p in require_list(passengers, "passengers")
        ]
        payments = [
            parse_model(Payment, p, "payment method")
            for p in require_list(payment_methods, "payment_methods")
        ]
        user_id = self._user_id(user_id)
        reservation_id = next(
            (r for r in NEW_RESERVATION_IDS if r not in self.store.table("reservations")), None
        )
        if reservation_id is None:
            raise ToolError("Too many reservations")
        reservation = validate_record(
            Reservation,
            {
                "reservation_id": reservation_id,
                "user_id": user_id,
                "origin": origin,
                "destination": destination,
                "flight_type": flight_type,
                "cabin": cabin,
                "flights": [],
                "passengers": [p.model_dump(mode="json") for p in people],
                "payment_history": [p.model_dump(mode="json") for p in payments],
                "created_at": BOOKING_TIME,
                "total_baggages": total_baggages,
                "nonfree_baggages": nonfree_baggages,
                "insurance": insurance,
            },
            "invalid reservation",
            ToolError,
        )
        cabin = reservation["cabin"]
        seats_taken: list[tuple[str, str]] = []
        total = 0
        for info in infos:
            flight = self._flight(info.flight_number)
            number, date = flight["flight_number"], info.date
            status = self._flight_date(number, date)
            if status["status"] != "available":
                raise ToolError(f"Flight {number} not available on date {date}")
            if status["available_seats"][cabin] < len(people):
                raise ToolError(f"Not enough seats on flight {number}")
            price = status["prices"][cabin]
            reservation["flights"].append(
                {
                    "flight_number": number,
                    "origin": flight["origin"],
                    "destination": flight["destination"],
                    "date": date,
                    "price": price,
                }
            )
            seats_taken.append((number, date))
            total += price * len(people)
        if reservation["insurance"] == "yes":
            total += 30 * len(people)
        total += 50 * reservation["nonfree_baggages"]

        methods = self.store.table("users")[user_id]["payment_methods"]
        for payment in payments:
            pid, amount = payment.payment_id, payment.amount
            if pid not in methods:
                raise ToolError(f"Payment method {pid} not found")
            if (
                methods[pid]["source"] in ("gift_card", "certificate")
                and methods[pid]["amount"] < amount
            ):
                raise ToolError(f"Not enough balance in payment method {pid}")
        paid = sum(p.amount for p in payments)
        if paid != total:
            raise ToolError(
                f"Payment amount does not add up, total price is {total}, but paid {paid}"
            )

        user = self.store.writable("users", user_id)
        for payment in payments:
            pid, amount = payment.payment_id, payment.amount
            method = user["payment_methods"].get(pid)
            if method is not None and method["source"] == "gift_card":
                method["amount"] = method["amount"] - amount
            elif method is not None and method["source"] == "certificate":
                del user["payment_methods"][pid]
        for number, date in seats_taken:
            self.store.writable("flights", number)["dates"][date]["available_seats"][cabin] -= len(
                people
            )
        self.store.put("reservations", reservation_id, reservation)
        user["reservations"].append(reservation_id)
        return reservation

    @domain_tool()
    def cancel_reservation(self, reservation_id: str) -> dict[str, Any]:
        """Cancel a whole reservation: every payment gets a matching refund entry."""
        key = self._reservation_id(reservation_id)
        reservation = self.store.writable("reservations", key)
        refunds = [
            {"payment_id": p["payment_id"], "amount": -p["amount"]}
            for p in reservation["payment_history"]
        ]
        reservation["payment_history"].extend(refunds)
        reservation["status"] = "cancelled"
        return reservation

    @domain_tool()
    def send_certificate(self, user_id: str, amount: int) -> str:
        """Add a travel certificate to a user's payment methods."""
        key = self._user_id(user_id)
        methods = self.store.table("users")[key]["payment_methods"]
        for certificate_id in NEW_CERTIFICATE_IDS:
            if certificate_id not in methods:
                record = validate_record(
                    Certificate,
                    {"source": "certificate", "id": certificate_id, "amount": amount},
                    "invalid certificate",
                    ToolError,
                )
                self.store.writable("users", key)["payment_methods"][certificate_id] = record
                return f"Certificate {certificate_id} added to user {user_id} with amount {amount}."
        raise ToolError("Too many certificates")

    @domain_tool()
    def update_reservation_baggages(
        self, reservation_id: str, total_baggages: int, nonfree_baggages: int, payment_id: str
    ) -> dict[str, Any]:
        """Change the bag counts of a reservation; extra paid bags cost 50 each."""
        key = self._reservation_id(reservation_id)
        total_bags, paid_bags = (
            _int(total_baggages, "total_baggages"),
            _int(nonfree_baggages, "nonfree_baggages"),
        )
        current = self.store.table("reservations")[key]
        user_id = self._user_id(current["user_id"])
        payment = self._charge_for_update(
            user_id, payment_id, 50 * max(0, paid_bags - current["nonfree_baggages"])
        )
        reservation = self.store.writable("reservations", key)
        if payment is not None:
            reservation["payment_history"].append(payment)
        reservation["total_baggages"] = total_bags
        reservation["nonfree_baggages"] = paid_bags
        return reservation

    @domain_tool()
    def update_reservation_flights(
        self, reservation_id: str, cabin: CabinClass, flights: list[dict[str, Any]], payment_id: str
    ) -> dict[str, Any]:
        """Replace a reservation's flights (and cabin); kept flights keep their price."""
        infos = [parse_model(FlightInfo, f, "flight") for f in require_list(flights, "flights")]
        try:
            cabin = _CABIN.validate_python(cabin)
        except ValidationError as exc:
            raise ToolError(f"invalid cabin: {describe(exc)}") from None
        key = self._reservation_id(reservation_id)
        current = self.store.table("reservations")[key]
        user_id = self._user_id(current["user_id"])
        passengers = len(current["passengers"])
        total = 0
        new_flights = []
        for info in infos:
            flight = self._flight(info.flight_number)
            number, date = flight["flight_number"], info.date
            kept = next(
                (
                    f
                    for f in current["flights"]
                    if f["flight_number"] == number
                    and f["date"] == date
                    and cabin == current["cabin"]
                ),
                None,
            )
            if kept is not None:
                total += kept["price"] * passengers
                new_flights.append(dict(kept))
                continue
            status = self._flight_date(number, date)
            if status["status"] != "available":
                raise ToolError(f"Flight {number} not available on date {date}")
            if status["available_seats"][cabin] < passengers:
                raise ToolError(f"Not enough seats on flight {number}")
            price = status["prices"][cabin]
            new_flights.append(
                {
                    "flight_number": number,
                    "origin": flight["origin"],
                    "destination": flight["destination"],
                    "date": date,
                    "price": price,
                }
            )
            total += price * passengers
        total -= sum(f["price"] for f in current["flights"]) * passengers
        payment = self._charge_for_update(user_id, payment_id, total)
        reservation = self.store.writable("reservations", key)
        if payment is not None:
            reservation["payment_history"].append(payment)
        reservation["flights"] = new_flights
        reservation["cabin"] = cabin
        return reservation

    @domain_tool()
    def update_reservation_passengers(
        self, reservation_id: str, passengers: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """Replace the passenger details of a reservation (the count must stay the same)."""
        people = [
            parse_model(Passenger, p, "passenger") for p in require_list(passengers, "passengers")
        ]
        key = self._reservation_id(reservation_id)
        if len(people) != len(self.store.table("reservations")[key]["passengers"]):
            raise ToolError("Number of passengers does not match")
        reservation = self.store.writable("reservations", key)
        reservation["passengers"] = [p.model_dump(mode="json") for p in people]
        return reservation


def _int(value: Any, name: str) -> int:
    if isinstance(value, bool):
        raise ToolError(f"{name} must be an integer")
    try:
        return _INT.validate_python(value)
    except ValidationError:
        raise ToolError(f"{name} must be an integer, got {value!r}") from None
