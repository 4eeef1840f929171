//! Tests of the built-in world: the generator (determinism, size, consistency), the API
//! catalog and its docs, logins and tokens, paging, action APIs and the diffs they
//! leave, `complete_task`, and a question answered end to end through the sandbox.

use std::collections::BTreeSet;

use sage_envs::sandbox::{ApiHost, ExecOutcome, Limits, Sandbox};
use sage_envs::world::records::{EntryKind, OrderStatus, RelationKind, RequestStatus};
use sage_envs::world::{
    registry, today, Db, Id, Money, PersonId, World, WorldConfig, LOGIN_APPS, MAX_PAGE_LIMIT, USER,
};
use serde_json::{json, Value};

const SEEDS: [u64; 3] = [0, 1, 20_240_611];

/// Calls an API that must succeed.
fn ok(world: &mut World, app: &str, api: &str, args: Value) -> Value {
    match world.invoke(app, api, args.clone()) {
        Ok(value) => value,
        Err(e) => panic!("apis.{app}.{api}({args}) failed: {e}"),
    }
}

/// Calls an API that must fail; returns the message.
fn err(world: &mut World, app: &str, api: &str, args: Value) -> String {
    match world.invoke(app, api, args.clone()) {
        Ok(value) => panic!("apis.{app}.{api}({args}) should fail, returned {value}"),
        Err(e) => e.message,
    }
}

/// The user's password for `app`, read through the supervisor app.
fn password(world: &mut World, app: &str) -> String {
    let passwords = ok(world, "supervisor", "show_account_passwords", json!({}));
    passwords
        .as_array()
        .and_then(|list| list.iter().find(|p| p["account_name"] == app))
        .and_then(|p| p["password"].as_str())
        .map(str::to_owned)
        .unwrap_or_else(|| panic!("no password for {app}"))
}

/// Logs the user in to `app` through its API and returns the token.
fn login(world: &mut World, app: &str) -> String {
    let profile = ok(world, "supervisor", "show_profile", json!({}));
    let username = if app == "phone" {
        &profile["phone_number"]
    } else {
        &profile["email"]
    };
    let password = password(world, app);
    let response = ok(
        world,
        app,
        "login",
        json!({"username": username, "password": password}),
    );
    response["access_token"]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

fn email(db: &Db, person: PersonId) -> String {
    db.email_of(person)
}

#[test]
fn same_seed_same_world_and_same_results() {
    for seed in SEEDS {
        let (mut a, mut b) = (World::generate(seed), World::generate(seed));
        assert!(a.db().diff(b.db()).is_empty(), "seed {seed}: worlds differ");
        let ta = login(&mut a, "coinpay");
        let tb = login(&mut b, "coinpay");
        assert_eq!(ta, tb, "tokens are deterministic");
        let args = json!({"access_token": ta, "page_limit": 20});
        assert_eq!(
            ok(&mut a, "coinpay", "show_transactions", args.clone()),
            ok(&mut b, "coinpay", "show_transactions", args)
        );
    }
    let (a, b) = (World::generate(1), World::generate(2));
    assert!(
        !a.db().diff(b.db()).is_empty(),
        "different seeds give different worlds"
    );
}

#[test]
fn today_is_fixed() {
    assert_eq!(today().to_string(), "2025-06-14");
    assert_eq!(today().weekday(), "Saturday");
    let world = World::generate(0);
    assert_eq!(world.now().to_string(), "2025-06-14T12:00:00");
}

#[test]
fn generated_world_is_consistent() {
    for seed in SEEDS {
        let world = World::generate(seed);
        let db = world.db();
        let person = |id: PersonId| {
            assert!(
                db.people.contains(id),
                "seed {seed}: person {id} does not exist"
            )
        };
        assert!(db.people.len() >= 50);
        let emails: BTreeSet<&str> = db.people.iter().map(|(_, p)| p.email.as_str()).collect();
        let phones: BTreeSet<&str> = db
            .people
            .iter()
            .map(|(_, p)| p.phone_number.as_str())
            .collect();
        assert_eq!(emails.len(), db.people.len(), "emails are unique");
        assert_eq!(phones.len(), db.people.len(), "phone numbers are unique");
        for (_, r) in db.relations.iter() {
            person(r.person);
            person(r.other);
            assert!(r.person < r.other);
        }
        for kind in RelationKind::ALL {
            assert!(
                !db.related(USER, kind).is_empty(),
                "the user has a {kind:?}"
            );
        }
        for (id, _) in db.people.iter() {
            for app in LOGIN_APPS {
                let account = db
                    .account(id, app)
                    .unwrap_or_else(|| panic!("person {id} has no {app} account"));
                assert!(!account.password.is_empty());
            }
        }
        for (_, a) in db.accounts.iter() {
            person(a.person);
        }
        for (_, s) in db.songs.iter() {
            assert!(db.albums.contains(s.album_id));
            assert!(s.artist_ids.iter().all(|&a| db.artists.contains(a)));
        }
        for (_, l) in db.song_likes.iter() {
            person(l.person);
            assert!(db.songs.contains(l.song_id));
        }
        for (_, p) in db.playlists.iter() {
            person(p.owner);
            assert!(p.song_ids.iter().all(|&s| db.songs.contains(s)));
        }
        for (_, t) in db.transactions.iter() {
            person(t.sender);
            person(t.receiver);
            assert!(t.amount > Money::ZERO);
            if let Some(card) = t.payment_card_id {
                assert_eq!(db.payment_cards.get(card).map(|c| c.owner), Some(t.sender));
            }
        }
        for (_, r) in db.payment_requests.iter() {
            assert_eq!(
                r.status == RequestStatus::Approved,
                r.transaction_id.is_some()
            );
            assert_eq!(r.status == RequestStatus::Pending, r.resolved_at.is_none());
        }
        for (_, c) in db.contacts.iter() {
            person(c.owner);
            let (known, _) = db
                .person_by_phone(&c.phone_number)
                .expect("contacts are people");
            assert!(db.relations_of(c.owner).iter().any(|&(p, _)| p == known));
        }
        for (_, i) in db.todo_items.iter() {
            assert_eq!(db.todo_lists.get(i.list_id).map(|l| l.owner), Some(i.owner));
            assert_eq!(i.done, i.completed_at.is_some());
        }
        for (_, o) in db.orders.iter() {
            assert_eq!(
                db.addresses.get(o.address_id).map(|a| a.owner),
                Some(o.owner)
            );
            assert_eq!(
                db.payment_cards.get(o.payment_card_id).map(|c| c.owner),
                Some(o.owner)
            );
            assert!(o.lines.iter().all(|l| db.products.contains(l.product_id)));
            let total: i64 = o
                .lines
                .iter()
                .map(|l| l.unit_price.cents() * i64::from(l.quantity))
                .sum();
            assert_eq!(o.total.cents(), total);
        }
        for (_, r) in db.reviews.iter() {
            let delivered = db.orders.find(|o| {
                o.owner == r.person
                    && o.status == OrderStatus::Delivered
                    && o.lines.iter().any(|l| l.product_id == r.product_id)
            });
            assert!(delivered.is_some(), "reviews are of delivered products");
        }
        for (_, f) in db.files.iter() {
            person(f.owner);
            let parent = f.parent();
            assert!(
                parent == "/"
                    || db
                        .file_at(f.owner, parent)
                        .is_some_and(|(_, d)| d.kind == EntryKind::Directory)
            );
        }
        for (_, e) in db.expenses.iter() {
            let group = db
                .bill_groups
                .get(e.group_id)
                .expect("expenses are in groups");
            assert!(group.member_ids.contains(&e.payer));
            assert!(e
                .shares
                .iter()
                .all(|s| group.member_ids.contains(&s.person)));
            assert_eq!(e.shares.iter().map(|s| s.amount).sum::<Money>(), e.amount);
        }
        let noon = today().at(12, 0, 0);
        assert!(db.transactions.iter().all(|(_, t)| t.created_at < noon));
        assert!(db.emails.iter().all(|(_, e)| e.sent_at < noon));
        assert!(db
            .notes
            .iter()
            .all(|(_, n)| n.created_at <= n.updated_at && n.updated_at < noon));
    }
}

#[test]
fn catalog_is_large_and_fully_documented() {
    let registry = registry();
    let apps = registry.app_names();
    assert!(
        apps.len() >= 10,
        "at least 8 apps plus supervisor and api_docs"
    );
    assert!(apps.contains(&"supervisor") && apps.contains(&"api_docs"));
    for app in LOGIN_APPS {
        assert!(apps.contains(&app));
        assert!(registry.doc(app, "login").is_some() && registry.doc(app, "logout").is_some());
    }
    assert!(registry.api_count() >= 120, "{} APIs", registry.api_count());
    for (app, description) in registry.apps() {
        assert!(!description.is_empty(), "{app} has a description");
        for doc in registry.docs(app) {
            let name = format!("{app}.{}", doc.name);
            assert!(!doc.description.is_empty(), "{name}");
            assert!(!doc.response.is_null(), "{name} documents its response");
            assert!(
                doc.params.iter().all(|p| !p.description.is_empty()),
                "{name} documents every parameter"
            );
            let spec = registry.spec(app, doc.name).expect("every doc has a spec");
            assert_eq!(spec.params.len(), doc.params.len(), "{name}");
            for (s, d) in spec.params.iter().zip(&doc.params) {
                assert_eq!(
                    (s.name.as_str(), s.ty, &s.default),
                    (d.name, d.ty, &d.default),
                    "{name}"
                );
            }
            let names: BTreeSet<&str> = doc.params.iter().map(|p| p.name).collect();
            assert_eq!(
                names.len(),
                doc.params.len(),
                "{name} has no repeated parameter"
            );
            assert_eq!(
                doc.needs_login(),
                LOGIN_APPS.contains(&app) && doc.name != "login",
                "{name}"
            );
            if doc.params.iter().any(|p| p.name == "page_index") {
                assert!(doc.response.is_array(), "{name}: paged APIs return lists");
            }
        }
    }
}

#[test]
fn api_docs_app_serves_the_docs() {
    let mut world = World::generate(0);
    let apps = ok(&mut world, "api_docs", "show_app_descriptions", json!({}));
    assert_eq!(
        apps.as_array().map(Vec::len),
        Some(registry().app_names().len())
    );
    let apis = ok(
        &mut world,
        "api_docs",
        "show_api_descriptions",
        json!({"app_name": "coinpay"}),
    );
    assert!(apis
        .as_array()
        .unwrap()
        .iter()
        .any(|a| a["name"] == "send_payment"));
    let doc = ok(
        &mut world,
        "api_docs",
        "show_api_doc",
        json!({"app_name": "coinpay", "api_name": "send_payment"}),
    );
    assert_eq!(
        doc,
        registry().doc("coinpay", "send_payment").unwrap().to_json()
    );
    assert!(doc["signature"]
        .as_str()
        .unwrap()
        .starts_with("apis.coinpay.send_payment(access_token: str, receiver_email: str"));
    let amount = doc["parameters"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "amount")
        .unwrap();
    assert_eq!(
        (&amount["type"], &amount["required"]),
        (&json!("float"), &json!(true))
    );
    assert!(err(
        &mut world,
        "api_docs",
        "show_api_descriptions",
        json!({"app_name": "venmo"})
    )
    .contains("no app named"));
    assert!(err(
        &mut world,
        "api_docs",
        "show_api_doc",
        json!({"app_name": "tunes", "api_name": "fly"})
    )
    .contains("no API named"));
    assert_eq!(
        world.api_names("notes").len(),
        registry().docs("notes").len()
    );
    assert!(world.spec("tunes", "like_song").is_some() && world.spec("tunes", "nope").is_none());
}

#[test]
fn login_and_token_checks() {
    let mut world = World::generate_with(
        3,
        WorldConfig {
            token_lifetime: 5,
            ..WorldConfig::default()
        },
    );
    let user_email = email(world.db(), USER);
    let message = err(
        &mut world,
        "tunes",
        "login",
        json!({"username": user_email, "password": "wrong"}),
    );
    assert!(
        message.contains("invalid tunes username or password"),
        "{message}"
    );
    let message = err(&mut world, "tunes", "show_playlists", json!({}));
    assert!(
        message.contains("missing required argument `access_token`"),
        "{message}"
    );
    let message = err(
        &mut world,
        "tunes",
        "show_playlists",
        json!({"access_token": "made-up"}),
    );
    assert!(
        message.contains("invalid access token for tunes"),
        "{message}"
    );

    let token = login(&mut world, "tunes");
    ok(
        &mut world,
        "tunes",
        "show_playlists",
        json!({"access_token": token}),
    );
    let message = err(
        &mut world,
        "notes",
        "show_notes",
        json!({"access_token": token}),
    );
    assert!(
        message.contains("issued by the tunes app, not notes"),
        "{message}"
    );
    for _ in 0..5 {
        ok(&mut world, "supervisor", "show_profile", json!({}));
    }
    let message = err(
        &mut world,
        "tunes",
        "show_playlists",
        json!({"access_token": token}),
    );
    assert!(message.contains("expired"), "{message}");

    let token = login(&mut world, "tunes");
    ok(
        &mut world,
        "tunes",
        "logout",
        json!({"access_token": token}),
    );
    let message = err(
        &mut world,
        "tunes",
        "show_playlists",
        json!({"access_token": token}),
    );
    assert!(message.contains("logged out"), "{message}");

    let phone_password = password(&mut world, "phone");
    let phone_email = err(
        &mut world,
        "phone",
        "login",
        json!({"username": user_email, "password": phone_password}),
    );
    assert!(
        phone_email.contains("invalid phone username or password"),
        "phone logs in with the number"
    );
}

#[test]
fn another_users_token_sees_only_their_own_data() {
    let mut world = World::generate(4);
    let db = world.db().clone();
    let (private_id, private) = db
        .playlists
        .find(|p| p.owner != USER && !p.is_public)
        .expect("someone has a private playlist");
    let (own_id, _) = db
        .playlists
        .find(|p| p.owner == USER)
        .expect("the user has playlists");
    let mine = login(&mut world, "tunes");
    let message = err(
        &mut world,
        "tunes",
        "show_playlist",
        json!({"access_token": mine, "playlist_id": private_id}),
    );
    assert!(
        message.contains("another user's private playlist"),
        "{message}"
    );

    let theirs = world.issue_token("tunes", private.owner).unwrap();
    let shown = ok(
        &mut world,
        "tunes",
        "show_playlist",
        json!({"access_token": theirs, "playlist_id": private_id}),
    );
    assert_eq!(shown["owner"]["email"], json!(email(&db, private.owner)));
    let message = err(
        &mut world,
        "tunes",
        "delete_playlist",
        json!({"access_token": theirs, "playlist_id": own_id}),
    );
    assert!(message.contains("belongs to another user"), "{message}");
    let their_count = db.playlists.filter(|p| p.owner == private.owner).count();
    let listed = ok(
        &mut world,
        "tunes",
        "show_playlists",
        json!({"access_token": theirs, "page_limit": 20}),
    );
    assert_eq!(listed.as_array().unwrap().len(), their_count);
    assert!(
        world.diff_since(&db).is_empty(),
        "failed calls change nothing"
    );
}

#[test]
fn list_apis_are_paged_with_a_capped_page_size() {
    let mut world = World::generate(5);
    let token = login(&mut world, "coinpay");
    for limit in [0, MAX_PAGE_LIMIT + 1] {
        let message = err(
            &mut world,
            "coinpay",
            "show_transactions",
            json!({"access_token": token, "page_limit": limit}),
        );
        assert!(
            message.contains("page_limit must be between 1 and 20"),
            "{message}"
        );
    }
    let message = err(
        &mut world,
        "coinpay",
        "show_transactions",
        json!({"access_token": token, "page_index": -1}),
    );
    assert!(message.contains("page_index"), "{message}");

    let expected = world
        .db()
        .transactions
        .filter(|t| t.sender == USER || t.receiver == USER)
        .count();
    let mut ids = BTreeSet::new();
    let mut last_created = String::from("9999");
    for page_index in 0.. {
        let page = ok(
            &mut world,
            "coinpay",
            "show_transactions",
            json!({"access_token": token, "page_index": page_index, "page_limit": 20}),
        );
        let page = page.as_array().unwrap();
        if page.is_empty() {
            break;
        }
        assert!(page.len() <= 20);
        for t in page {
            assert!(
                ids.insert(t["transaction_id"].as_u64().unwrap()),
                "no transaction twice"
            );
            let created = t["created_at"].as_str().unwrap().to_owned();
            assert!(created <= last_created, "newest first");
            last_created = created;
        }
    }
    assert!(expected > 20, "enough to need several pages");
    assert_eq!(ids.len(), expected);
    let default_page = ok(
        &mut world,
        "coinpay",
        "show_transactions",
        json!({"access_token": token}),
    );
    assert_eq!(default_page.as_array().map(Vec::len), Some(10));
}

#[test]
fn send_payment_changes_exactly_the_documented_rows() {
    let mut world = World::generate(6);
    let before = world.snapshot();
    let friend = world.db().related(USER, RelationKind::Friend)[0];
    let wallet = |db: &Db, p: PersonId| db.wallet_of(p).map(|(id, w)| (id, w.balance)).unwrap();
    let (user_wallet, user_balance) = wallet(&before, USER);
    let (friend_wallet, friend_balance) = wallet(&before, friend);

    let token = login(&mut world, "coinpay");
    let sent = ok(
        &mut world,
        "coinpay",
        "send_payment",
        json!({"access_token": token, "receiver_email": email(&before, friend), "amount": 12.5, "description": "Lunch"}),
    );
    let diff = world.diff_since(&before);
    assert_eq!(
        diff.changed_tables(),
        vec!["coinpay.wallets", "coinpay.transactions"],
        "{diff}"
    );
    let transactions = diff.table("coinpay.transactions").unwrap();
    let id = sent["transaction_id"].as_u64().unwrap();
    assert_eq!(transactions.added_ids(), vec![id]);
    let row = &transactions.added[0].row;
    assert_eq!(
        (row["sender"].as_u64(), row["receiver"].as_u64()),
        (Some(USER), Some(friend))
    );
    assert_eq!(
        (&row["amount"], &row["description"]),
        (&json!(12.5), &json!("Lunch"))
    );
    let wallets = diff.table("coinpay.wallets").unwrap();
    let mut changed = wallets.changed_ids();
    changed.sort();
    let mut expected = vec![user_wallet, friend_wallet];
    expected.sort();
    assert_eq!(changed, expected);
    let user_change = wallets.change(user_wallet).unwrap();
    assert_eq!(user_change.field_names(), vec!["balance"]);
    assert_eq!(
        user_change.fields[0].after,
        json!((user_balance - Money::from_cents(1250)).dollars())
    );
    assert_eq!(
        wallet(world.db(), friend).1,
        friend_balance + Money::from_cents(1250)
    );
    assert_eq!(
        sent["balance"],
        json!((user_balance - Money::from_cents(1250)).dollars())
    );

    let message = err(
        &mut world,
        "coinpay",
        "send_payment",
        json!({"access_token": token, "receiver_email": email(&before, friend), "amount": 1_000_000}),
    );
    assert!(message.contains("balance"), "{message}");
    let message = err(
        &mut world,
        "coinpay",
        "send_payment",
        json!({"access_token": token, "receiver_email": email(&before, friend), "amount": 1.234}),
    );
    assert!(message.contains("2 decimal places"), "{message}");
    let expired = before
        .payment_cards
        .find(|c| c.owner == USER && c.is_expired_on(today()))
        .map(|(id, _)| id)
        .unwrap();
    let message = err(
        &mut world,
        "coinpay",
        "send_payment",
        json!({"access_token": token, "receiver_email": email(&before, friend), "amount": 5, "payment_card_id": expired}),
    );
    assert!(message.contains("expired"), "{message}");
}

#[test]
fn music_actions_and_their_diffs() {
    let mut world = World::generate(7);
    let before = world.snapshot();
    let token = login(&mut world, "tunes");
    let (playlist_id, playlist) = before.playlists.find(|p| p.owner == USER).unwrap();
    let song_id = before
        .songs
        .iter()
        .map(|(id, _)| id)
        .find(|id| !playlist.song_ids.contains(id) && !before.likes_song(USER, *id))
        .unwrap();

    ok(
        &mut world,
        "tunes",
        "like_song",
        json!({"access_token": token, "song_id": song_id}),
    );
    ok(
        &mut world,
        "tunes",
        "add_song_to_playlist",
        json!({"access_token": token, "playlist_id": playlist_id, "song_id": song_id}),
    );
    let diff = world.diff_since(&before);
    assert_eq!(
        diff.changed_tables(),
        vec!["tunes.song_likes", "tunes.playlists"],
        "{diff}"
    );
    let like = &diff.table("tunes.song_likes").unwrap().added[0].row;
    assert_eq!(
        (like["person"].as_u64(), like["song_id"].as_u64()),
        (Some(USER), Some(song_id))
    );
    let change = diff
        .table("tunes.playlists")
        .unwrap()
        .change(playlist_id)
        .unwrap();
    assert_eq!(change.field_names(), vec!["song_ids"]);
    let mut songs = playlist.song_ids.clone();
    songs.push(song_id);
    assert_eq!(change.fields[0].after, json!(songs));

    let message = err(
        &mut world,
        "tunes",
        "like_song",
        json!({"access_token": token, "song_id": song_id}),
    );
    assert!(message.contains("already like"), "{message}");
    let message = err(
        &mut world,
        "tunes",
        "add_song_to_playlist",
        json!({"access_token": token, "playlist_id": playlist_id, "song_id": 999_999}),
    );
    assert!(message.contains("no song with id 999999"), "{message}");

    ok(
        &mut world,
        "tunes",
        "unlike_song",
        json!({"access_token": token, "song_id": song_id}),
    );
    ok(
        &mut world,
        "tunes",
        "remove_song_from_playlist",
        json!({"access_token": token, "playlist_id": playlist_id, "song_id": song_id}),
    );
    assert!(
        world.diff_since(&before).is_empty(),
        "undoing both actions restores the state"
    );
}

#[test]
fn notes_todo_and_files_actions() {
    let mut world = World::generate(8);
    let before = world.snapshot();
    let notes = login(&mut world, "notes");
    let created = ok(
        &mut world,
        "notes",
        "create_note",
        json!({"access_token": notes, "title": "Ideas", "body": "one", "tags": ["Work", "work", "home"]}),
    );
    let note_id = created["note_id"].as_u64().unwrap();
    ok(
        &mut world,
        "notes",
        "append_to_note",
        json!({"access_token": notes, "note_id": note_id, "text": "two"}),
    );
    let note = ok(
        &mut world,
        "notes",
        "show_note",
        json!({"access_token": notes, "note_id": note_id}),
    );
    assert_eq!(
        (&note["body"], &note["tags"]),
        (&json!("one\ntwo"), &json!(["work", "home"]))
    );

    let todo = login(&mut world, "todo");
    let (item_id, _) = before
        .todo_items
        .find(|i| i.owner == USER && !i.done)
        .unwrap();
    ok(
        &mut world,
        "todo",
        "complete_item",
        json!({"access_token": todo, "item_id": item_id}),
    );
    let message = err(
        &mut world,
        "todo",
        "complete_item",
        json!({"access_token": todo, "item_id": item_id}),
    );
    assert!(message.contains("already done"), "{message}");

    let files = login(&mut world, "files");
    ok(
        &mut world,
        "files",
        "create_directory",
        json!({"access_token": files, "path": "/archive/2025", "parents": true}),
    );
    ok(
        &mut world,
        "files",
        "move_path",
        json!({"access_token": files, "source": "/work/reports", "destination": "/archive/2025/reports"}),
    );
    let listed = ok(
        &mut world,
        "files",
        "list_directory",
        json!({"access_token": files, "path": "/archive/2025/reports"}),
    );
    assert_eq!(listed.as_array().map(Vec::len), Some(5));
    let message = err(
        &mut world,
        "files",
        "delete_path",
        json!({"access_token": files, "path": "/archive"}),
    );
    assert!(message.contains("not empty"), "{message}");

    let diff = world.diff_since(&before);
    assert_eq!(
        diff.changed_tables(),
        vec!["notes.notes", "todo.items", "files.entries"],
        "{diff}"
    );
    assert_eq!(
        diff.table("notes.notes").unwrap().added_ids(),
        vec![note_id]
    );
    let item = diff.table("todo.items").unwrap().change(item_id).unwrap();
    assert_eq!(item.field_names(), vec!["completed_at", "done"]);
    let entries = diff.table("files.entries").unwrap();
    assert_eq!(entries.added.len(), 2, "two new directories");
    assert_eq!(
        entries.changed.len(),
        6,
        "the reports directory and its five files moved"
    );
    assert!(entries
        .changed
        .iter()
        .all(|c| c.field_names() == vec!["modified_at", "path"]));
    assert!(entries.removed.is_empty());
}

#[test]
fn shop_order_and_splitbill_settle_up() {
    let mut world = World::generate(9);
    let before = world.snapshot();
    let shop = login(&mut world, "shop");
    let card = before
        .payment_cards
        .find(|c| c.owner == USER && !c.is_expired_on(today()))
        .map(|(id, _)| id)
        .unwrap();
    let address = before
        .addresses
        .find(|a| a.owner == USER)
        .map(|(id, _)| id)
        .unwrap();
    let old_cart = before.cart_items.filter(|c| c.owner == USER).count();
    ok(
        &mut world,
        "shop",
        "clear_cart",
        json!({"access_token": shop}),
    );
    let stocked: Vec<(Id, Money)> = before
        .products
        .filter(|p| p.stock >= 3)
        .map(|(id, p)| (id, p.price))
        .take(2)
        .collect();
    for &(product_id, _) in &stocked {
        ok(
            &mut world,
            "shop",
            "add_to_cart",
            json!({"access_token": shop, "product_id": product_id}),
        );
    }
    ok(
        &mut world,
        "shop",
        "add_to_cart",
        json!({"access_token": shop, "product_id": stocked[0].0, "quantity": 2}),
    );
    let expected_total = stocked[0].1.cents() * 3 + stocked[1].1.cents();
    let cart = ok(
        &mut world,
        "shop",
        "show_cart",
        json!({"access_token": shop}),
    );
    assert_eq!(
        cart["total"],
        json!(Money::from_cents(expected_total).dollars())
    );
    let order = ok(
        &mut world,
        "shop",
        "place_order",
        json!({"access_token": shop, "payment_card_id": card, "address_id": address}),
    );
    assert_eq!(order["total"], cart["total"]);
    let diff = world.diff_since(&before);
    assert_eq!(
        diff.changed_tables(),
        vec!["shop.products", "shop.cart_items", "shop.orders"],
        "{diff}"
    );
    assert_eq!(
        diff.table("shop.cart_items").unwrap().removed.len(),
        old_cart,
        "the old cart was cleared"
    );
    let stock = diff.table("shop.products").unwrap();
    assert_eq!(stock.changed_ids(), vec![stocked[0].0, stocked[1].0]);
    let first = stock.change(stocked[0].0).unwrap();
    assert_eq!(first.field_names(), vec!["stock"]);
    assert_eq!(
        first.fields[0].after.as_u64(),
        first.fields[0].before.as_u64().map(|s| s - 3)
    );
    let placed = &diff.table("shop.orders").unwrap().added[0].row;
    assert_eq!(
        (&placed["status"], placed["payment_card_id"].as_u64()),
        (&json!("placed"), Some(card))
    );
    let cart_after = ok(
        &mut world,
        "shop",
        "show_cart",
        json!({"access_token": shop}),
    );
    assert_eq!(cart_after["items"], json!([]));
    let message = err(
        &mut world,
        "shop",
        "place_order",
        json!({"access_token": shop, "payment_card_id": card, "address_id": address}),
    );
    assert!(message.contains("cart is empty"), "{message}");

    let split = login(&mut world, "splitbill");
    let before_split = world.snapshot();
    let (group_id, group) = before
        .bill_groups
        .find(|g| g.member_ids.contains(&USER))
        .unwrap();
    let other = group.member_ids[1];
    let added = ok(
        &mut world,
        "splitbill",
        "add_expense",
        json!({"access_token": split, "group_id": group_id, "description": "Cab", "amount": 10.01, "split_among_emails": [email(&before, USER), email(&before, other)]}),
    );
    let expense = world
        .db()
        .expenses
        .get(added["expense_id"].as_u64().unwrap())
        .unwrap()
        .clone();
    assert_eq!(
        expense
            .shares
            .iter()
            .map(|s| s.amount.cents())
            .collect::<Vec<_>>(),
        vec![501, 500]
    );
    let debt = world
        .db()
        .group_debts(group_id, USER)
        .into_iter()
        .find(|&(p, _)| p == other)
        .unwrap()
        .1;
    let balances = ok(
        &mut world,
        "splitbill",
        "show_balances",
        json!({"access_token": split, "group_id": group_id}),
    );
    let shown = balances["balances"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["email"] == json!(email(&before, other)))
        .unwrap();
    assert_eq!(shown["balance"], json!(debt.dollars()));
    assert_ne!(debt, Money::ZERO);
    let settled = ok(
        &mut world,
        "splitbill",
        "settle_up",
        json!({"access_token": split, "group_id": group_id, "email": email(&before, other)}),
    );
    assert_eq!(settled["remaining_balance"], json!(0.0));
    let debt_after = world
        .db()
        .group_debts(group_id, USER)
        .into_iter()
        .find(|&(p, _)| p == other)
        .unwrap()
        .1;
    assert_eq!(debt_after, Money::ZERO);
    let message = err(
        &mut world,
        "splitbill",
        "settle_up",
        json!({"access_token": split, "group_id": group_id, "email": email(&before, other)}),
    );
    assert!(message.contains("settled up"), "{message}");
    let diff = world.diff_since(&before_split);
    assert_eq!(
        diff.changed_tables(),
        vec!["splitbill.expenses", "splitbill.settlements"],
        "{diff}"
    );
    let settlement = &diff.table("splitbill.settlements").unwrap().added[0].row;
    assert_eq!(settlement["amount"], json!(debt.abs().dollars()));
}

#[test]
fn email_and_text_reach_the_recipient() {
    let mut world = World::generate(10);
    let before = world.snapshot();
    let friend = before.related(USER, RelationKind::Friend)[0];
    let mail = login(&mut world, "mail");
    ok(
        &mut world,
        "mail",
        "send_email",
        json!({"access_token": mail, "recipients": [email(&before, friend)], "subject": "Hi", "body": "Hello!"}),
    );
    let phone = login(&mut world, "phone");
    let number = before.people.get(friend).unwrap().phone_number.clone();
    ok(
        &mut world,
        "phone",
        "send_text_message",
        json!({"access_token": phone, "phone_number": number, "body": "On my way"}),
    );
    let diff = world.diff_since(&before);
    let emails = diff.table("mail.emails").unwrap();
    let owners: Vec<Option<u64>> = emails
        .added
        .iter()
        .map(|e| e.row["owner"].as_u64())
        .collect();
    assert_eq!(owners, vec![Some(USER), Some(friend)]);
    assert_eq!(
        (
            &emails.added[0].row["folder"],
            &emails.added[1].row["folder"]
        ),
        (&json!("sent"), &json!("inbox"))
    );
    let texts = diff.table("phone.text_messages").unwrap();
    assert_eq!(texts.added.len(), 2);
    assert_eq!(texts.added[1].row["direction"], json!("received"));
}

#[test]
fn complete_task_records_the_answer_and_ends_the_episode() {
    let mut world = World::generate(11);
    assert!(world.completion().is_none());
    ok(
        &mut world,
        "supervisor",
        "complete_task",
        json!({"answer": [1, "two"]}),
    );
    let completion = world.completion().unwrap();
    assert_eq!(
        (completion.answer.clone(), completion.at_call),
        (json!([1, "two"]), 1)
    );
    let message = err(&mut world, "supervisor", "show_profile", json!({}));
    assert!(message.contains("already complete"), "{message}");
    world.start_episode();
    assert!(!world.is_complete() && world.api_calls() == 0);
    ok(&mut world, "supervisor", "complete_task", json!({}));
    assert_eq!(world.completion().unwrap().answer, Value::Null);
}

fn run(sandbox: &mut Sandbox, world: &mut World, code: &str) -> ExecOutcome {
    let outcome = sandbox.execute(code, world);
    assert!(
        outcome.succeeded(),
        "code failed:\n{code}\n---\n{}",
        outcome.observation()
    );
    outcome
}

#[test]
fn question_answered_end_to_end_through_the_sandbox() {
    let mut world = World::generate(12);
    let db = world.db().clone();
    let (friend, _) = db
        .relations_of(USER)
        .into_iter()
        .max_by_key(|&(p, _)| {
            db.transactions
                .filter(|t| t.sender == p && t.receiver == USER)
                .count()
        })
        .unwrap();
    let expected: Money = db
        .transactions
        .filter(|t| t.sender == friend && t.receiver == USER)
        .map(|(_, t)| t.amount)
        .sum();
    let friend_email = email(&db, friend);

    let mut sandbox = Sandbox::new(Limits::default());
    let lookup = run(&mut sandbox, &mut world, "doc = apis.api_docs.show_api_doc(app_name='coinpay', api_name='show_transactions')\nprint([p['name'] for p in doc['parameters']])");
    assert!(lookup.output.contains("user_email"), "{}", lookup.output);
    let code = format!(
        r#"
def total_received_from(email: str) -> float:
    """Dollars the user received on coinpay from one person."""
    profile = apis.supervisor.show_profile()
    passwords = {{p["account_name"]: p["password"] for p in apis.supervisor.show_account_passwords()}}
    token = apis.coinpay.login(username=profile["email"], password=passwords["coinpay"])["access_token"]
    cents = 0
    for page_index in range(1000):
        page = apis.coinpay.show_transactions(access_token=token, direction="received", user_email=email, page_index=page_index, page_limit=20)
        if not page:
            break
        for t in page:
            cents += int(t["amount"] * 100 + 0.5)
    return cents / 100

apis.supervisor.complete_task(answer=total_received_from("{friend_email}"))
"#
    );
    let outcome = run(&mut sandbox, &mut world, &code);
    assert_eq!(outcome.defined, vec!["total_received_from"]);
    let pages = expected_pages(&db, friend);
    assert_eq!(
        outcome.api_calls.len(),
        4 + pages,
        "profile, passwords, login, pages, complete"
    );
    let answer = world
        .completion()
        .expect("the task was completed")
        .answer
        .as_f64()
        .unwrap();
    assert!(
        (answer - expected.dollars()).abs() < 1e-9,
        "{answer} vs {expected}"
    );
    assert!(
        world.diff_since(&db).is_empty(),
        "a question changes nothing"
    );
}

/// Pages `show_transactions` needs for the user's receipts from `friend`, the empty
/// last page included.
fn expected_pages(db: &Db, friend: PersonId) -> usize {
    let count = db
        .transactions
        .filter(|t| t.sender == friend && t.receiver == USER)
        .count();
    count.div_ceil(20) + 1
}

#[test]
fn api_errors_reach_agent_code_as_tracebacks() {
    let mut world = World::generate(13);
    let mut sandbox = Sandbox::new(Limits::default());
    let outcome = sandbox.execute("apis.tunes.show_playlists(access_token='nope')", &mut world);
    let error = outcome.error.expect("the call fails");
    assert!(
        error.message.contains("invalid access token for tunes"),
        "{}",
        error.message
    );
    let outcome = sandbox.execute(
        "apis.coinpay.send_payment(access_token='x', amount='5')",
        &mut world,
    );
    let error = outcome.error.expect("the call fails");
    assert!(
        error.message.contains("receiver_email"),
        "{}",
        error.message
    );
}

#[test]
fn every_api_answers_a_plain_call_without_panicking() {
    let mut world = World::generate(14);
    let tokens: Vec<(String, String)> = LOGIN_APPS
        .iter()
        .map(|&app| (app.to_owned(), login(&mut world, app)))
        .collect();
    for (app, _) in registry().apps() {
        for doc in registry().docs(app) {
            if doc.name == "complete_task" || doc.name == "logout" {
                continue;
            }
            let mut args = serde_json::Map::new();
            for p in &doc.params {
                let value = match (p.name, p.ty) {
                    ("access_token", _) => json!(tokens
                        .iter()
                        .find(|(a, _)| a == app)
                        .map(|(_, t)| t.clone())),
                    (_, sage_envs::sandbox::ParamType::Int) => json!(1),
                    (_, sage_envs::sandbox::ParamType::Float) => json!(1.0),
                    (_, sage_envs::sandbox::ParamType::Bool) => json!(true),
                    (_, sage_envs::sandbox::ParamType::List) => json!([]),
                    (_, sage_envs::sandbox::ParamType::Dict) => json!({}),
                    _ => json!("x"),
                };
                if p.required() || p.name == "access_token" {
                    args.insert(p.name.to_owned(), value);
                }
            }
            let _ = world.invoke(app, doc.name, Value::Object(args));
        }
    }
}

#[test]
fn queries_agree_with_the_apis() {
    let mut world = World::generate(15);
    let db = world.db().clone();
    let tunes = login(&mut world, "tunes");
    let (song_id, _) = db
        .songs
        .iter()
        .max_by_key(|&(id, _)| db.song_like_count(id))
        .unwrap();
    let song = ok(
        &mut world,
        "tunes",
        "show_song",
        json!({"access_token": tunes, "song_id": song_id}),
    );
    assert_eq!(song["like_count"], json!(db.song_like_count(song_id)));
    let shop = login(&mut world, "shop");
    let (product_id, _) = db
        .products
        .iter()
        .max_by_key(|&(id, _)| db.product_rating(id).1)
        .unwrap();
    let product = ok(
        &mut world,
        "shop",
        "show_product",
        json!({"access_token": shop, "product_id": product_id}),
    );
    let (rating, count) = db.product_rating(product_id);
    assert_eq!(
        (product["rating"].as_f64(), product["review_count"].as_u64()),
        (rating, Some(count as u64))
    );
    let phone = login(&mut world, "phone");
    let roommates = ok(
        &mut world,
        "phone",
        "show_contacts",
        json!({"access_token": phone, "relationship": "roommate"}),
    );
    let shown: BTreeSet<String> = roommates
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["phone_number"].as_str().unwrap().to_owned())
        .collect();
    let expected: BTreeSet<String> = db
        .related(USER, RelationKind::Roommate)
        .into_iter()
        .map(|p| db.people.get(p).unwrap().phone_number.clone())
        .collect();
    assert_eq!(shown, expected);
    let ids: Vec<Id> = db.people.iter().map(|(id, _)| id).collect();
    assert_eq!(ids.first(), Some(&USER));
}

#[test]
fn dates_and_timestamps_count_from_the_start_of_2000() {
    use sage_envs::world::{Date, Timestamp};
    assert_eq!(Date::from_days(0), Date::from_ymd(2000, 1, 1).unwrap());
    assert_eq!(Date::from_days(-1), Date::from_ymd(1999, 12, 31).unwrap());
    let day = Date::from_ymd(2025, 6, 14).unwrap();
    assert_eq!(Date::from_days(day.days()), day);
    let moment = day.at(13, 5, 9);
    assert_eq!(Timestamp::from_seconds(moment.seconds()), moment);
    assert_eq!(
        moment.seconds(),
        i64::from(day.days()) * 86_400 + 13 * 3600 + 5 * 60 + 9
    );
    assert_eq!(Timestamp::from_seconds(-1).date(), Date::from_days(-1));
}
