"""Record models of the airline DB (flights, users, reservations), in tau2's layout and field types.

Gift-card and certificate amounts are floats; prices, payments, seats and bag counts are ints.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field

CabinClass = Literal["business", "economy", "basic_economy"]
FlightType = Literal["round_trip", "one_way"]
Insurance = Literal["yes", "no"]


class Name(BaseModel):
    """A person's name."""

    first_name: str
    """Given name."""
    last_name: str
    """Family name."""


class Address(BaseModel):
    """A postal address."""

    address1: str
    """First line."""
    address2: str | None = None
    """Second line."""
    city: str
    """City."""
    country: str
    """Country."""
    state: str
    """State or province."""
    zip: str
    """Postal code."""


class Payment(BaseModel):
    """A payment (negative for a refund) on a reservation."""

    payment_id: str
    """Payment method charged."""
    amount: int
    """Amount in dollars."""


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


class GiftCard(BaseModel):
    """A gift card with a balance."""

    source: Literal["gift_card"]
    """Always gift_card."""
    id: str
    """Payment method id."""
    amount: float
    """Remaining balance in dollars."""


class Certificate(BaseModel):
    """A travel certificate, used up by one booking."""

    source: Literal["certificate"]
    """Always certificate."""
    id: str
    """Payment method id."""
    amount: float
    """Value in dollars."""


PaymentMethod = Annotated[CreditCard | GiftCard | Certificate, Field(discriminator="source")]


class Passenger(BaseModel):
    """A traveller."""

    first_name: str
    """Given name."""
    last_name: str
    """Family name."""
    dob: str
    """Date of birth, YYYY-MM-DD."""


class FlightDateAvailable(BaseModel):
    """A bookable flight date."""

    status: Literal["available"]
    """Always available."""
    available_seats: dict[CabinClass, int]
    """Free seats per cabin."""
    prices: dict[CabinClass, int]
    """Price per cabin in dollars."""


class FlightDateOnTime(BaseModel):
    """A flight date that is on time."""

    status: Literal["on time"]
    """Always on time."""
    estimated_departure_time_est: str
    """Expected departure, YYYY-MM-DDTHH:MM:SS EST."""
    estimated_arrival_time_est: str
    """Expected arrival."""


class FlightDateFlying(BaseModel):
    """A flight date that is in the air."""

    status: Literal["flying"]
    """Always flying."""
    actual_departure_time_est: str
    """Departure time."""
    estimated_arrival_time_est: str
    """Expected arrival."""


class FlightDateLanded(BaseModel):
    """A flight date that has landed."""

    status: Literal["landed"]
    """Always landed."""
    actual_departure_time_est: str
    """Departure time."""
    actual_arrival_time_est: str
    """Arrival time."""


class FlightDateCancelled(BaseModel):
    """A cancelled flight date."""

    status: Literal["cancelled"]
    """Always cancelled."""


class FlightDateDelayed(BaseModel):
    """A delayed flight date."""

    status: Literal["delayed"]
    """Always delayed."""
    estimated_departure_time_est: str
    """Expected departure."""
    estimated_arrival_time_est: str
    """Expected arrival."""


FlightDateStatus = Annotated[
    FlightDateAvailable
    | FlightDateOnTime
    | FlightDateFlying
    | FlightDateLanded
    | FlightDateCancelled
    | FlightDateDelayed,
    Field(discriminator="status"),
]


class Flight(BaseModel):
    """A scheduled flight and its status on each date."""

    flight_number: str
    """Flight number, e.g. HAT001."""
    origin: str
    """Origin IATA code."""
    destination: str
    """Destination IATA code."""
    scheduled_departure_time_est: str
    """Departure time of day, HH:MM:SS EST."""
    scheduled_arrival_time_est: str
    """Arrival time of day; may end in +1 for the next day."""
    dates: dict[str, FlightDateStatus]
    """Status by date, YYYY-MM-DD."""


class ReservationFlight(BaseModel):
    """One flight of a reservation."""

    flight_number: str
    """Flight number."""
    origin: str
    """Origin IATA code."""
    destination: str
    """Destination IATA code."""
    date: str
    """Date, YYYY-MM-DD."""
    price: int
    """Price per passenger in dollars."""


class User(BaseModel):
    """A customer."""

    user_id: str
    """Unique user id."""
    name: Name
    """Full name."""
    address: Address
    """Address."""
    email: str
    """Email address."""
    dob: str
    """Date of birth."""
    payment_methods: dict[str, PaymentMethod]
    """Saved payment methods by id."""
    saved_passengers: list[Passenger]
    """Saved travellers."""
    membership: Literal["gold", "silver", "regular"]
    """Membership level."""
    reservations: list[str]
    """Reservation ids, oldest first."""


class Reservation(BaseModel):
    """A booking."""

    reservation_id: str
    """Six-character id."""
    user_id: str
    """Customer id."""
    origin: str
    """Trip origin."""
    destination: str
    """Trip destination."""
    flight_type: FlightType
    """one_way or round_trip."""
    cabin: CabinClass
    """Cabin class."""
    flights: list[ReservationFlight]
    """Flights, in travel order."""
    passengers: list[Passenger]
    """Travellers."""
    payment_history: list[Payment]
    """Payments and refunds, in order."""
    created_at: str
    """Booking time, YYYY-MM-DDTHH:MM:SS."""
    total_baggages: int
    """Checked bags."""
    nonfree_baggages: int
    """Paid bags."""
    insurance: Insurance
    """Travel insurance."""
    status: Literal["cancelled"] | None = None
    """cancelled, or null while active."""


class FlightInfo(BaseModel):
    """A flight number on a date, as tools receive it."""

    flight_number: str
    """Flight number."""
    date: str
    """Date, YYYY-MM-DD."""


class FlightDB(BaseModel):
    """The airline DB."""

    model_config = ConfigDict(extra="forbid")

    flights: dict[str, Flight]
    """Flights by number."""
    users: dict[str, User]
    """Users by id."""
    reservations: dict[str, Reservation]
    """Reservations by id."""


TABLES: dict[str, type[BaseModel]] = {"flights": Flight, "users": User, "reservations": Reservation}
