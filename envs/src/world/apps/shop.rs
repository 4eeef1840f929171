//! The `shop` app: online shopping. A product catalog with reviews, and each person's
//! cart, orders and wish list. Orders are paid with a payment card of the supervisor
//! app and shipped to one of its addresses.

use std::collections::BTreeMap;

use serde_json::{json, Value};

use super::{
    cmp_ignore_case, login, login_apis, logout, matches, message, needle, newest_first, not_found,
    one_of, sort_rows,
};
use crate::sandbox::{ApiError, ParamType::*};
use crate::world::args::Args;
use crate::world::db::Db;
use crate::world::declare::{api, declare_app, AppDecl};
use crate::world::money::Money;
use crate::world::records::{
    CartItem, Order, OrderLine, OrderStatus, Product, Review, WishlistItem,
};
use crate::world::table::{Id, PersonId};
use crate::world::World;

const APP: &str = "shop";
const PRODUCT_SORTS: [&str; 6] = [
    "name",
    "price",
    "-price",
    "rating",
    "-rating",
    "-review_count",
];

pub(super) fn app() -> AppDecl {
    let product = json!({
        "product_id": "int", "name": "str", "category": "str", "brand": "str", "price": "float",
        "rating": "float or None (average stars, 2 decimals)", "review_count": "int", "stock": "int"
    });
    let mut product_details = product.clone();
    product_details["description"] = json!("str");
    let [login_api, logout_api] = login_apis(
        APP,
        "The email address of the shop account.",
        |w, a| login(w, a, APP),
        |w, a| logout(w, a, APP),
    );
    declare_app(
        APP,
        "Online shopping: search products, read and write reviews, manage the cart and wish list, place, cancel and return orders.",
        vec![
            login_api,
            logout_api,
            api("show_categories", "Lists the product categories with how many products each has.", show_categories)
                .token()
                .returns(json!([{"category": "str", "product_count": "int"}])),
            api("search_products", "Searches the catalog. Default order: catalog order.", search_products)
                .token()
                .opt("query", Str, Value::Null, "Text that must occur (case-insensitive) in the name, brand or description.")
                .opt("category", Str, Value::Null, "Only this category (case-insensitive).")
                .opt("brand", Str, Value::Null, "Only this brand (case-insensitive).")
                .opt("min_price", Float, Value::Null, "Only products costing at least this many dollars.")
                .opt("max_price", Float, Value::Null, "Only products costing at most this many dollars.")
                .opt("sort_by", Str, Value::Null, "Order: name, price, -price, rating, -rating or -review_count (- means descending; unrated products count as rating 0).")
                .paged()
                .returns(json!([product]))
                .error("sort_by is not one of the listed orders, or a price is negative"),
            api("show_product", "Shows one product with its description.", show_product)
                .token()
                .req("product_id", Int, "The product.")
                .returns(product_details)
                .error("there is no product with that id"),
            api("show_product_reviews", "Lists a product's reviews, newest first.", show_product_reviews)
                .token()
                .req("product_id", Int, "The product.")
                .paged()
                .returns(json!([{"review_id": "int", "reviewer": "str (name)", "rating": "int", "text": "str", "created_at": "str"}]))
                .error("there is no product with that id"),
            api("write_review", "Reviews a product the user received in a delivered order; one review per product.", write_review)
                .token()
                .req("product_id", Int, "The product.")
                .req("rating", Int, "Stars, 1 to 5.")
                .opt("text", Str, json!(""), "Text.")
                .returns(json!({"review_id": "int", "message": "str"}))
                .error("there is no product with that id")
                .error("the rating is not between 1 and 5")
                .error("the user has no delivered order with the product, or already reviewed it"),
            api("show_cart", "Shows the user's cart and its total.", show_cart)
                .token()
                .returns(json!({"items": [{"product_id": "int", "name": "str", "unit_price": "float", "quantity": "int", "subtotal": "float"}], "total": "float"})),
            api("add_to_cart", "Adds units of a product to the user's cart (adding to the quantity if it is already there).", add_to_cart)
                .token()
                .req("product_id", Int, "The product.")
                .opt("quantity", Int, json!(1), "Units to add, at least 1.")
                .returns(json!({"message": "str", "quantity": "int"}))
                .error("there is no product with that id, or quantity is below 1"),
            api("update_cart_item", "Sets the quantity of a product already in the user's cart.", update_cart_item)
                .token()
                .req("product_id", Int, "The product.")
                .req("quantity", Int, "The new quantity, at least 1 (use remove_from_cart to remove).")
                .returns(json!({"message": "str"}))
                .error("the product is not in the cart, or quantity is below 1"),
            api("remove_from_cart", "Removes a product from the user's cart.", remove_from_cart)
                .token()
                .req("product_id", Int, "The product.")
                .returns(json!({"message": "str"}))
                .error("the product is not in the cart"),
            api("clear_cart", "Empties the user's cart.", clear_cart)
                .token()
                .returns(json!({"message": "str", "removed_item_count": "int"})),
            api("place_order", "Orders everything in the user's cart at current prices, charging a payment card and shipping to an address. Empties the cart and takes the units out of stock.", place_order)
                .token()
                .req("payment_card_id", Int, "One of the user's cards (apis.supervisor.show_payment_cards).")
                .req("address_id", Int, "One of the user's addresses (apis.supervisor.show_addresses).")
                .returns(json!({"order_id": "int", "total": "float", "message": "str"}))
                .error("the cart is empty")
                .error("the card is not the user's or has expired, or the address is not the user's")
                .error("a product does not have enough units in stock"),
            api("show_orders", "Lists the user's orders, newest first.", show_orders)
                .token()
                .opt("status", Str, Value::Null, "Only orders with this status: placed, shipped, delivered, cancelled or returned.")
                .paged()
                .returns(json!([{"order_id": "int", "status": "str", "total": "float", "item_count": "int", "created_at": "str"}]))
                .error("status is not one of the listed values"),
            api("show_order", "Shows one of the user's orders with its products.", show_order)
                .token()
                .req("order_id", Int, "The order.")
                .returns(json!({
                    "order_id": "int", "status": "str", "total": "float", "created_at": "str",
                    "address_id": "int", "payment_card_id": "int",
                    "items": [{"product_id": "int", "name": "str", "quantity": "int", "unit_price": "float"}]
                }))
                .error("there is no order with that id among the user's orders"),
            api("cancel_order", "Cancels an order that has not shipped yet (status placed); its units go back in stock.", cancel_order)
                .token()
                .req("order_id", Int, "The order.")
                .returns(json!({"message": "str"}))
                .error("there is no order with that id among the user's orders")
                .error("the order's status is not placed"),
            api("return_order", "Returns a delivered order.", return_order)
                .token()
                .req("order_id", Int, "The order.")
                .returns(json!({"message": "str"}))
                .error("there is no order with that id among the user's orders")
                .error("the order's status is not delivered"),
            api("show_wishlist", "Lists the user's wish list, most recently added first.", show_wishlist)
                .token()
                .paged()
                .returns(json!([{"product_id": "int", "name": "str", "price": "float", "added_at": "str"}])),
            api("add_to_wishlist", "Adds a product to the user's wish list.", add_to_wishlist)
                .token()
                .req("product_id", Int, "The product.")
                .returns(json!({"message": "str"}))
                .error("there is no product with that id, or it is already on the wish list"),
            api("remove_from_wishlist", "Removes a product from the user's wish list.", remove_from_wishlist)
                .token()
                .req("product_id", Int, "The product.")
                .returns(json!({"message": "str"}))
                .error("the product is not on the wish list"),
        ],
    )
}

/// Average rating (2 decimals) and review count of every reviewed product.
fn ratings(db: &Db) -> BTreeMap<Id, (f64, usize)> {
    let mut sums: BTreeMap<Id, (u32, usize)> = BTreeMap::new();
    for (_, r) in db.reviews.iter() {
        let entry = sums.entry(r.product_id).or_default();
        entry.0 += u32::from(r.rating);
        entry.1 += 1;
    }
    sums.into_iter()
        .map(|(id, (sum, n))| (id, ((f64::from(sum) / n as f64 * 100.0).round() / 100.0, n)))
        .collect()
}

fn product_json(id: Id, p: &Product, rating: Option<(f64, usize)>) -> Value {
    json!({
        "product_id": id, "name": p.name, "category": p.category, "brand": p.brand, "price": p.price,
        "rating": rating.map(|r| r.0), "review_count": rating.map_or(0, |r| r.1), "stock": p.stock,
    })
}

fn existing_product(db: &Db, id: Id) -> Result<&Product, ApiError> {
    db.products.get(id).ok_or_else(|| not_found("product", id))
}

fn own_order(db: &Db, me: PersonId, id: Id) -> Result<&Order, ApiError> {
    db.orders
        .get(id)
        .filter(|o| o.owner == me)
        .ok_or_else(|| not_found("order of yours", id))
}

fn cart_row(db: &Db, me: PersonId, product_id: Id) -> Option<Id> {
    db.cart_items
        .find(|c| c.owner == me && c.product_id == product_id)
        .map(|(id, _)| id)
}

fn quantity(args: &Args, name: &str) -> Result<u32, ApiError> {
    match args.opt_int(name)?.unwrap_or(1) {
        q @ 1..=1000 => Ok(q as u32),
        q => Err(ApiError::new(format!(
            "`{name}` must be between 1 and 1000, got {q}"
        ))),
    }
}

fn set_status(db: &mut Db, id: Id, status: OrderStatus) {
    if let Some(order) = db.orders.get_mut(id) {
        order.status = status;
    }
}

fn show_categories(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    world.auth(APP, args)?;
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, p) in world.db.products.iter() {
        *counts.entry(&p.category).or_default() += 1;
    }
    Ok(Value::Array(
        counts
            .into_iter()
            .map(|(c, n)| json!({"category": c, "product_count": n}))
            .collect(),
    ))
}

fn search_products(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    world.auth(APP, args)?;
    let page = args.page()?;
    let query = needle(args.opt_str("query")?);
    let category = args.opt_str("category")?.map(str::trim);
    let brand = args.opt_str("brand")?.map(str::trim);
    let min_price = args.opt_price("min_price")?;
    let max_price = args.opt_price("max_price")?;
    let sort_by = args
        .opt_str("sort_by")?
        .map(|s| one_of("sort_by", s, &PRODUCT_SORTS))
        .transpose()?;
    let db = &world.db;
    let ratings = ratings(db);
    let mut rows: Vec<(Id, &Product)> = db
        .products
        .filter(|p| {
            category.is_none_or(|c| p.category.eq_ignore_ascii_case(c))
                && brand.is_none_or(|b| p.brand.eq_ignore_ascii_case(b))
                && min_price.is_none_or(|m| p.price >= m)
                && max_price.is_none_or(|m| p.price <= m)
                && (matches(&query, &p.name)
                    || matches(&query, &p.brand)
                    || matches(&query, &p.description))
        })
        .collect();
    let rating_of = |id: Id| ratings.get(&id).map_or(0.0, |r| r.0);
    match sort_by {
        Some("name") => rows.sort_by(|a, b| cmp_ignore_case(&a.1.name, &b.1.name)),
        Some("price") => sort_rows(&mut rows, false, |p| p.price),
        Some("-price") => sort_rows(&mut rows, true, |p| p.price),
        Some("rating") => rows.sort_by(|a, b| rating_of(a.0).total_cmp(&rating_of(b.0))),
        Some("-rating") => rows.sort_by(|a, b| rating_of(b.0).total_cmp(&rating_of(a.0))),
        Some(_) => {
            rows.sort_by_key(|(id, _)| std::cmp::Reverse(ratings.get(id).map_or(0, |r| r.1)))
        }
        None => {}
    }
    Ok(page.of(rows, |(id, p)| {
        product_json(id, p, ratings.get(&id).copied())
    }))
}

fn show_product(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    world.auth(APP, args)?;
    let id = args.id("product_id")?;
    let product = existing_product(&world.db, id)?;
    let (rating, count) = world.db.product_rating(id);
    let mut value = product_json(id, product, rating.map(|r| (r, count)));
    value["description"] = json!(product.description);
    Ok(value)
}

fn show_product_reviews(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    world.auth(APP, args)?;
    let page = args.page()?;
    let id = args.id("product_id")?;
    let db = &world.db;
    existing_product(db, id)?;
    let mut rows: Vec<(Id, &Review)> = db.reviews.filter(|r| r.product_id == id).collect();
    newest_first(&mut rows, |r| r.created_at);
    Ok(page.of(rows, |(rid, r)| {
        json!({"review_id": rid, "reviewer": db.name_of(r.person), "rating": r.rating, "text": r.text, "created_at": r.created_at})
    }))
}

fn write_review(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let product_id = args.id("product_id")?;
    let rating = args.int("rating")?;
    existing_product(&world.db, product_id)?;
    if !(1..=5).contains(&rating) {
        return Err(ApiError::new(format!(
            "rating must be between 1 and 5, got {rating}"
        )));
    }
    let received = world
        .db
        .orders
        .find(|o| {
            o.owner == me
                && o.status == OrderStatus::Delivered
                && o.lines.iter().any(|l| l.product_id == product_id)
        })
        .is_some();
    if !received {
        return Err(ApiError::new(format!(
            "you have no delivered order with product {product_id}"
        )));
    }
    if world
        .db
        .reviews
        .find(|r| r.person == me && r.product_id == product_id)
        .is_some()
    {
        return Err(ApiError::new(format!(
            "you already reviewed product {product_id}"
        )));
    }
    let review = Review {
        person: me,
        product_id,
        rating: rating as u8,
        text: args.opt_str("text")?.unwrap_or("").trim().to_owned(),
        created_at: world.now(),
    };
    let id = world.db.reviews.insert(review);
    Ok(json!({"review_id": id, "message": "Review posted."}))
}

fn show_cart(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let db = &world.db;
    let mut total = Money::ZERO;
    let items: Vec<Value> = db
        .cart_items
        .filter(|c| c.owner == me)
        .filter_map(|(_, c)| db.products.get(c.product_id).map(|p| (c, p)))
        .map(|(c, p)| {
            let subtotal = p.price.times(c.quantity);
            total += subtotal;
            json!({"product_id": c.product_id, "name": p.name, "unit_price": p.price, "quantity": c.quantity, "subtotal": subtotal})
        })
        .collect();
    Ok(json!({"items": items, "total": total}))
}

fn add_to_cart(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let product_id = args.id("product_id")?;
    let added = quantity(args, "quantity")?;
    existing_product(&world.db, product_id)?;
    let quantity =
        match cart_row(&world.db, me, product_id).and_then(|id| world.db.cart_items.get_mut(id)) {
            Some(row) => {
                row.quantity = row.quantity.saturating_add(added);
                row.quantity
            }
            None => {
                world.db.cart_items.insert(CartItem {
                    owner: me,
                    product_id,
                    quantity: added,
                });
                added
            }
        };
    Ok(json!({"message": format!("Product {product_id} is in your cart."), "quantity": quantity}))
}

fn update_cart_item(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let product_id = args.id("product_id")?;
    let quantity = quantity(args, "quantity")?;
    let row = cart_row(&world.db, me, product_id)
        .and_then(|id| world.db.cart_items.get_mut(id))
        .ok_or_else(|| ApiError::new(format!("product {product_id} is not in your cart")))?;
    row.quantity = quantity;
    Ok(message(&format!(
        "Set product {product_id} to quantity {quantity}."
    )))
}

fn remove_from_cart(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let product_id = args.id("product_id")?;
    let id = cart_row(&world.db, me, product_id)
        .ok_or_else(|| ApiError::new(format!("product {product_id} is not in your cart")))?;
    world.db.cart_items.remove(id);
    Ok(message(&format!(
        "Removed product {product_id} from your cart."
    )))
}

fn clear_cart(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let removed = world.db.cart_items.remove_where(|c| c.owner == me);
    Ok(json!({"message": "Cart emptied.", "removed_item_count": removed}))
}

fn place_order(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let card_id = args.id("payment_card_id")?;
    let address_id = args.id("address_id")?;
    let db = &world.db;
    let card = db
        .payment_cards
        .get(card_id)
        .filter(|c| c.owner == me)
        .ok_or_else(|| not_found("payment card of yours", card_id))?;
    if card.is_expired_on(world.now().date()) {
        return Err(ApiError::new(format!("payment card {card_id} has expired")));
    }
    db.addresses
        .get(address_id)
        .filter(|a| a.owner == me)
        .ok_or_else(|| not_found("address of yours", address_id))?;
    let mut lines = Vec::new();
    for (_, item) in db.cart_items.filter(|c| c.owner == me) {
        let product = existing_product(db, item.product_id)?;
        if product.stock < item.quantity {
            return Err(ApiError::new(format!(
                "only {} units of product {} ({}) are in stock",
                product.stock, item.product_id, product.name
            )));
        }
        lines.push(OrderLine {
            product_id: item.product_id,
            quantity: item.quantity,
            unit_price: product.price,
        });
    }
    if lines.is_empty() {
        return Err(ApiError::new("your cart is empty"));
    }
    let total: Money = lines.iter().map(|l| l.unit_price.times(l.quantity)).sum();
    for line in &lines {
        if let Some(product) = world.db.products.get_mut(line.product_id) {
            product.stock = product.stock.saturating_sub(line.quantity);
        }
    }
    world.db.cart_items.remove_where(|c| c.owner == me);
    let created_at = world.now();
    let id = world.db.orders.insert(Order {
        owner: me,
        lines,
        total,
        address_id,
        payment_card_id: card_id,
        status: OrderStatus::Placed,
        created_at,
    });
    Ok(json!({"order_id": id, "total": total, "message": format!("Order {id} placed.")}))
}

fn show_orders(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let page = args.page()?;
    let status = args
        .opt_str("status")?
        .map(|s| {
            one_of(
                "status",
                s,
                &["placed", "shipped", "delivered", "cancelled", "returned"],
            )
            .map(|s| OrderStatus::parse(s).unwrap_or(OrderStatus::Placed))
        })
        .transpose()?;
    let mut rows: Vec<(Id, &Order)> = world
        .db
        .orders
        .filter(|o| o.owner == me && status.is_none_or(|s| o.status == s))
        .collect();
    newest_first(&mut rows, |r| r.created_at);
    Ok(page.of(rows, |(id, o)| {
        let count: u32 = o.lines.iter().map(|l| l.quantity).sum();
        json!({"order_id": id, "status": o.status, "total": o.total, "item_count": count, "created_at": o.created_at})
    }))
}

fn show_order(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let id = args.id("order_id")?;
    let db = &world.db;
    let order = own_order(db, me, id)?;
    let items: Vec<Value> = order
        .lines
        .iter()
        .map(|l| {
            let name = db.products.get(l.product_id).map(|p| p.name.as_str()).unwrap_or("");
            json!({"product_id": l.product_id, "name": name, "quantity": l.quantity, "unit_price": l.unit_price})
        })
        .collect();
    Ok(json!({
        "order_id": id, "status": order.status, "total": order.total, "created_at": order.created_at,
        "address_id": order.address_id, "payment_card_id": order.payment_card_id, "items": items,
    }))
}

fn cancel_order(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let id = args.id("order_id")?;
    let order = own_order(&world.db, me, id)?.clone();
    if order.status != OrderStatus::Placed {
        return Err(ApiError::new(format!(
            "order {id} is {}, only placed orders can be cancelled",
            order.status.name()
        )));
    }
    for line in &order.lines {
        if let Some(product) = world.db.products.get_mut(line.product_id) {
            product.stock = product.stock.saturating_add(line.quantity);
        }
    }
    set_status(&mut world.db, id, OrderStatus::Cancelled);
    Ok(message(&format!("Order {id} cancelled.")))
}

fn return_order(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let id = args.id("order_id")?;
    let status = own_order(&world.db, me, id)?.status;
    if status != OrderStatus::Delivered {
        return Err(ApiError::new(format!(
            "order {id} is {}, only delivered orders can be returned",
            status.name()
        )));
    }
    set_status(&mut world.db, id, OrderStatus::Returned);
    Ok(message(&format!("Order {id} returned.")))
}

fn show_wishlist(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let page = args.page()?;
    let db = &world.db;
    let mut rows: Vec<(Id, &WishlistItem)> = db.wishlist_items.filter(|w| w.owner == me).collect();
    newest_first(&mut rows, |r| r.added_at);
    Ok(page.of(rows, |(_, w)| {
        let product = db.products.get(w.product_id);
        json!({
            "product_id": w.product_id,
            "name": product.map(|p| p.name.as_str()).unwrap_or(""),
            "price": product.map(|p| p.price).unwrap_or_default(),
            "added_at": w.added_at,
        })
    }))
}

fn add_to_wishlist(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let product_id = args.id("product_id")?;
    existing_product(&world.db, product_id)?;
    if world
        .db
        .wishlist_items
        .find(|w| w.owner == me && w.product_id == product_id)
        .is_some()
    {
        return Err(ApiError::new(format!(
            "product {product_id} is already on your wish list"
        )));
    }
    let added_at = world.now();
    world.db.wishlist_items.insert(WishlistItem {
        owner: me,
        product_id,
        added_at,
    });
    Ok(message(&format!(
        "Added product {product_id} to your wish list."
    )))
}

fn remove_from_wishlist(world: &mut World, args: &Args) -> Result<Value, ApiError> {
    let me = world.auth(APP, args)?;
    let product_id = args.id("product_id")?;
    if world
        .db
        .wishlist_items
        .remove_where(|w| w.owner == me && w.product_id == product_id)
        == 0
    {
        return Err(ApiError::new(format!(
            "product {product_id} is not on your wish list"
        )));
    }
    Ok(message(&format!(
        "Removed product {product_id} from your wish list."
    )))
}
