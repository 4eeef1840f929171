//! The shop: a catalog, everyone's orders, reviews of delivered products, carts and
//! wish lists.

use super::words::{ShopCategory, ADJECTIVES, PRODUCT_QUALIFIERS, REVIEW_TEXTS, SHOP_CATEGORIES};
use super::{moment_after, others, past_moment};
use crate::world::db::Db;
use crate::world::money::Money;
use crate::world::records::{
    CartItem, Order, OrderLine, OrderStatus, Product, Review, WishlistItem,
};
use crate::world::rng::Rng;
use crate::world::table::{Id, PersonId};
use crate::world::time::{today, Timestamp};
use crate::world::USER;

const PRODUCTS_PER_CATEGORY: usize = 15;
const USER_ORDERS: usize = 15;

pub(super) fn generate(db: &mut Db, rng: &mut Rng) {
    add_products(db, rng);
    let products: Vec<Id> = db.products.iter().map(|(id, _)| id).collect();
    let mut people = vec![USER];
    people.extend(others(db));
    let mut orders: Vec<Order> = Vec::new();
    for &owner in &people {
        let count = if owner == USER {
            USER_ORDERS
        } else {
            rng.range(1, 4) as usize
        };
        for _ in 0..count {
            if let Some(order) = order(db, rng, owner, &products) {
                orders.push(order);
            }
        }
    }
    orders.sort_by_key(|o| o.created_at);
    let mut reviews: Vec<Review> = Vec::new();
    for order in orders {
        if order.status == OrderStatus::Delivered {
            for line in &order.lines {
                let reviewed = reviews
                    .iter()
                    .any(|r| r.person == order.owner && r.product_id == line.product_id);
                let chance = if order.owner == USER { 0.4 } else { 0.7 };
                if !reviewed && rng.chance(chance) {
                    reviews.push(review(rng, order.owner, line.product_id, order.created_at));
                }
            }
        }
        db.orders.insert(order);
    }
    reviews.sort_by_key(|r| r.created_at);
    for r in reviews {
        db.reviews.insert(r);
    }
    for &owner in &people {
        let user = owner == USER;
        let in_cart = if user { 3 } else { rng.range(0, 2) as usize };
        for product_id in rng.sample(&products, in_cart) {
            let quantity = rng.range(1, 3) as u32;
            db.cart_items.insert(CartItem {
                owner,
                product_id,
                quantity,
            });
        }
        let wished = if user { 5 } else { rng.range(0, 3) as usize };
        for product_id in rng.sample(&products, wished) {
            let added_at = past_moment(rng, 200);
            db.wishlist_items.insert(WishlistItem {
                owner,
                product_id,
                added_at,
            });
        }
    }
}

fn add_products(db: &mut Db, rng: &mut Rng) {
    let mut names: Vec<String> = Vec::new();
    for ShopCategory {
        name: category,
        nouns,
        brands,
        low,
        high,
    } in SHOP_CATEGORIES
    {
        let mut added = 0;
        while added < PRODUCTS_PER_CATEGORY {
            let (brand, qualifier, noun) = (
                rng.pick(&brands),
                rng.pick(&PRODUCT_QUALIFIERS),
                rng.pick(&nouns),
            );
            let name = format!("{brand} {qualifier} {noun}");
            if names.contains(&name) {
                continue;
            }
            names.push(name.clone());
            added += 1;
            let dollars = rng.range(low, high);
            let cents = *rng.pick(&[99, 49, 0, 95]);
            db.products.insert(Product {
                name,
                category: category.to_owned(),
                brand: brand.to_string(),
                price: Money::from_cents(dollars * 100 + cents),
                description: format!(
                    "A {} {} by {brand}, with a {} finish.",
                    qualifier.to_lowercase(),
                    noun.to_lowercase(),
                    rng.pick(&ADJECTIVES).to_lowercase()
                ),
                stock: if rng.chance(0.08) {
                    0
                } else {
                    rng.range(1, 200) as u32
                },
            });
        }
    }
}

fn order(db: &Db, rng: &mut Rng, owner: PersonId, products: &[Id]) -> Option<Order> {
    let created_at = past_moment(rng, 365);
    let payment_card_id = db
        .payment_cards
        .find(|c| c.owner == owner && !c.is_expired_on(today()))
        .map(|(id, _)| id)?;
    let address_id = db.addresses.find(|a| a.owner == owner).map(|(id, _)| id)?;
    let count = rng.range(1, 3) as usize;
    let lines: Vec<OrderLine> = rng
        .sample(products, count)
        .into_iter()
        .filter_map(|product_id| {
            let unit_price = db.products.get(product_id)?.price;
            Some(OrderLine {
                product_id,
                quantity: rng.range(1, 3) as u32,
                unit_price,
            })
        })
        .collect();
    let total = lines.iter().map(|l| l.unit_price.times(l.quantity)).sum();
    Some(Order {
        owner,
        lines,
        total,
        address_id,
        payment_card_id,
        status: status(rng, created_at),
        created_at,
    })
}

/// An order's status from its age: recent orders are still on their way.
fn status(rng: &mut Rng, created_at: Timestamp) -> OrderStatus {
    let age_days = today().days() - created_at.date().days();
    match age_days {
        ..=2 => OrderStatus::Placed,
        3..=7 => OrderStatus::Shipped,
        _ if rng.chance(0.06) => OrderStatus::Cancelled,
        _ if rng.chance(0.06) => OrderStatus::Returned,
        _ => OrderStatus::Delivered,
    }
}

fn review(rng: &mut Rng, person: PersonId, product_id: Id, ordered_at: Timestamp) -> Review {
    let rating = *rng.pick(&[5u8, 5, 4, 4, 4, 3, 3, 2, 1]);
    let text = rng.pick(&REVIEW_TEXTS[usize::from(rating - 1)]).to_string();
    let created_at = moment_after(rng, ordered_at, 8 * 86_400, 40 * 86_400);
    Review {
        person,
        product_id,
        rating,
        text,
        created_at,
    }
}
