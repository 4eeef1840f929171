//! Rows of the `shop` app: the product catalog, reviews, carts, orders and wish lists.

use serde::Serialize;

use crate::world::money::Money;
use crate::world::table::{Id, PersonId};
use crate::world::time::Timestamp;

/// A product for sale.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Product {
    /// Name.
    pub name: String,
    /// Category (`kitchen`, `books`, ...).
    pub category: String,
    /// Brand.
    pub brand: String,
    /// Price of one unit.
    pub price: Money,
    /// Description.
    pub description: String,
    /// Units in stock.
    pub stock: u32,
}

/// A person's review of a product.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Review {
    /// The reviewer.
    pub person: PersonId,
    /// The product.
    pub product_id: Id,
    /// Stars, 1-5.
    pub rating: u8,
    /// Text.
    pub text: String,
    /// When it was written.
    pub created_at: Timestamp,
}

/// A product in a person's cart.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct CartItem {
    /// Whose cart.
    pub owner: PersonId,
    /// The product (at most one row per product and owner).
    pub product_id: Id,
    /// Units.
    pub quantity: u32,
}

/// Where an order stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OrderStatus {
    /// Placed, not yet shipped; can be cancelled.
    Placed,
    /// On its way.
    Shipped,
    /// Arrived; can be returned.
    Delivered,
    /// Cancelled before shipping.
    Cancelled,
    /// Returned after delivery.
    Returned,
}

impl OrderStatus {
    /// Every status.
    pub const ALL: [OrderStatus; 5] = [
        OrderStatus::Placed,
        OrderStatus::Shipped,
        OrderStatus::Delivered,
        OrderStatus::Cancelled,
        OrderStatus::Returned,
    ];

    /// The name APIs show.
    pub fn name(self) -> &'static str {
        match self {
            OrderStatus::Placed => "placed",
            OrderStatus::Shipped => "shipped",
            OrderStatus::Delivered => "delivered",
            OrderStatus::Cancelled => "cancelled",
            OrderStatus::Returned => "returned",
        }
    }

    /// The status with this name.
    pub fn parse(name: &str) -> Option<OrderStatus> {
        OrderStatus::ALL.into_iter().find(|s| s.name() == name)
    }
}

/// One product of an order.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct OrderLine {
    /// The product.
    pub product_id: Id,
    /// Units.
    pub quantity: u32,
    /// Price of one unit when ordered.
    pub unit_price: Money,
}

/// An order.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Order {
    /// Who ordered.
    pub owner: PersonId,
    /// What was ordered.
    pub lines: Vec<OrderLine>,
    /// Sum of quantity times unit price over the lines.
    pub total: Money,
    /// Where it ships (a row of `addresses`).
    pub address_id: Id,
    /// The card charged (a row of `payment_cards`).
    pub payment_card_id: Id,
    /// Where it stands.
    pub status: OrderStatus,
    /// When it was placed.
    pub created_at: Timestamp,
}

/// A product on a person's wish list.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct WishlistItem {
    /// Whose wish list.
    pub owner: PersonId,
    /// The product (at most one row per product and owner).
    pub product_id: Id,
    /// When it was added.
    pub added_at: Timestamp,
}
