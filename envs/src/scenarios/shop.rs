//! Templates on the `shop` app alone: the catalog, orders and the wish list.

use std::collections::BTreeSet;

use serde_json::{json, Value};

use super::pick::{dollars, int, params, text};
use super::{SkillParam, Solution, TaskKind, Template};
use crate::world::records::OrderStatus;
use crate::world::{Db, Id, Money, USER};

/// The shop templates.
pub(super) const TEMPLATES: &[Template] = &[
    Template {
        name: "shop_cheapest_of_brand",
        apps: &["shop"],
        kind: TaskKind::Question,
        pick: |p| {
            let pairs: BTreeSet<(String, String)> =
                p.db().products.iter().map(|(_, x)| (x.category.clone(), x.brand.clone())).collect();
            let pairs: Vec<(String, String)> = pairs.into_iter().collect();
            let (category, brand) = p.pick(&pairs)?;
            cheapest(p.db(), &category, &brand)?;
            Some(params([("category", json!(category)), ("brand", json!(brand))]))
        },
        instruction: |p| {
            format!(
                "What is the cheapest {} product by {} in the shop? Answer with the product's name.",
                text(p, "category"),
                text(p, "brand")
            )
        },
        reference: |r, p| {
            let id = cheapest(r.db(), text(p, "category"), text(p, "brand"));
            Ok(id.and_then(|id| r.db().products.get(id)).map_or(Value::Null, |x| json!(x.name)))
        },
        solution: Solution {
            names: &["cheapest_product_of_brand", "find_cheapest_by_brand", "lowest_priced_brand_product"],
            summaries: &[
                "Finds the cheapest product of a brand within a shop category.",
                "Returns the name of the lowest-priced product a brand sells in a category.",
            ],
            params: &[
                SkillParam { name: "category", ty: "str", doc: "the shop category" },
                SkillParam { name: "brand", ty: "str", doc: "the brand" },
            ],
            returns: ("str", "the product's name"),
            docs: &[("shop", "search_products")],
            body: include_str!("skills/shop_cheapest_of_brand.star"),
        },
    },
    Template {
        name: "shop_spent_on_category",
        apps: &["shop"],
        kind: TaskKind::Question,
        pick: |p| {
            let db = p.db();
            let categories: BTreeSet<String> = delivered_lines(db)
                .into_iter()
                .filter_map(|(product, _)| db.products.get(product).map(|x| x.category.clone()))
                .collect();
            let categories: Vec<String> = categories.into_iter().collect();
            Some(params([("category", json!(p.pick(&categories)?))]))
        },
        instruction: |p| {
            format!(
                "How much have I spent on {} products across my delivered shop orders (unit price times quantity)?",
                text(p, "category")
            )
        },
        reference: |r, p| {
            let db = r.db();
            let category = text(p, "category");
            let total: Money = delivered_lines(db)
                .into_iter()
                .filter(|(product, _)| db.products.get(*product).is_some_and(|x| x.category == category))
                .map(|(_, spent)| spent)
                .sum();
            Ok(json!(total.dollars()))
        },
        solution: Solution {
            names: &["spent_on_category", "delivered_spending_in_category", "category_spending"],
            summaries: &[
                "Adds up what the user paid for products of a category in delivered shop orders.",
                "Returns the user's total spending on one product category over delivered orders.",
            ],
            params: &[SkillParam { name: "category", ty: "str", doc: "the shop category" }],
            returns: ("float", "the total in dollars"),
            docs: &[("shop", "show_orders"), ("shop", "show_order"), ("shop", "show_product")],
            body: include_str!("skills/shop_spent_on_category.star"),
        },
    },
    Template {
        name: "shop_wishlist_to_cart",
        apps: &["shop"],
        kind: TaskKind::Action,
        pick: |p| {
            let prices: Vec<Money> = wishlist(p.db()).into_iter().map(|(_, price)| price).collect();
            let price = p.pick(&prices)?;
            let limit = (price.cents() + 99) / 100 + p.range(0, 15);
            Some(params([("limit", json!(limit))]))
        },
        instruction: |p| {
            format!(
                "Move every product on my shop wish list that costs {} or less into my cart (one unit each) and take it off the wish list.",
                dollars(int(p, "limit") as f64)
            )
        },
        reference: |r, p| {
            let limit = Money::from_dollars(int(p, "limit"));
            for (product, price) in wishlist(r.db()) {
                if price <= limit {
                    r.call("shop", "add_to_cart", json!({"product_id": product, "quantity": 1}))?;
                    r.call("shop", "remove_from_wishlist", json!({"product_id": product}))?;
                }
            }
            Ok(Value::Null)
        },
        solution: Solution {
            names: &["move_cheap_wishlist_to_cart", "wishlist_to_cart_under", "cart_affordable_wishes"],
            summaries: &[
                "Moves the wish-list products costing at most a limit into the cart, one unit each.",
                "Puts every affordable wish-list product in the cart and removes it from the wish list.",
            ],
            params: &[SkillParam { name: "limit", ty: "float", doc: "the highest price in dollars" }],
            returns: ("list", "names of the products moved"),
            docs: &[("shop", "show_wishlist"), ("shop", "add_to_cart"), ("shop", "remove_from_wishlist")],
            body: include_str!("skills/shop_wishlist_to_cart.star"),
        },
    },
];

/// The one cheapest product of `brand` in `category`, if exactly one has the lowest
/// price.
fn cheapest(db: &Db, category: &str, brand: &str) -> Option<Id> {
    let products: Vec<(Id, Money)> = db
        .products
        .filter(|x| {
            x.category.eq_ignore_ascii_case(category) && x.brand.eq_ignore_ascii_case(brand)
        })
        .map(|(id, x)| (id, x.price))
        .collect();
    let low = products.iter().map(|&(_, price)| price).min()?;
    let mut at_low = products.iter().filter(|&&(_, price)| price == low);
    let (id, _) = *at_low.next()?;
    at_low.next().is_none().then_some(id)
}

/// Every line of the user's delivered orders as `(product, unit price x quantity)`.
fn delivered_lines(db: &Db) -> Vec<(Id, Money)> {
    db.orders
        .filter(|o| o.owner == USER && o.status == OrderStatus::Delivered)
        .flat_map(|(_, o)| o.lines.iter())
        .map(|l| {
            (
                l.product_id,
                Money::from_cents(l.unit_price.cents() * i64::from(l.quantity)),
            )
        })
        .collect()
}

/// The user's wish list as `(product, current price)`.
fn wishlist(db: &Db) -> Vec<(Id, Money)> {
    db.wishlist_items
        .filter(|w| w.owner == USER)
        .filter_map(|(_, w)| {
            db.products
                .get(w.product_id)
                .map(|x| (w.product_id, x.price))
        })
        .collect()
}
