//! Word pools the generator draws names and text from. Invented for this project.

/// Given names.
pub(super) const FIRST_NAMES: [&str; 84] = [
    "Amara", "Bennett", "Camille", "Dario", "Elena", "Felix", "Greta", "Hugo", "Iris", "Jonah",
    "Kira", "Luca", "Maya", "Nolan", "Olive", "Pablo", "Quinn", "Rosa", "Silas", "Tessa",
    "Uma", "Victor", "Wren", "Xavier", "Yara", "Zane", "Adele", "Boris", "Clara", "Declan",
    "Esme", "Farid", "Gemma", "Hector", "Ines", "Jasper", "Keiko", "Leon", "Mira", "Nadia",
    "Oscar", "Priya", "Rafael", "Sienna", "Tobias", "Vera", "Wesley", "Yusuf", "Zoe", "Anton",
    "Bianca", "Cyrus", "Delia", "Emil", "Flora", "Gideon", "Hana", "Ivo", "Juno", "Kofi",
    "Lena", "Marco", "Nina", "Omar", "Petra", "Ronan", "Saanvi", "Theo", "Ursula", "Vikram",
    "Willa", "Ximena", "Yosef", "Zelda", "Arjun", "Beatrix", "Cormac", "Dalia", "Eitan", "Freya",
    "Goran", "Hazel", "Idris", "Jolene",
];

/// Family names.
pub(super) const LAST_NAMES: [&str; 60] = [
    "Abernathy", "Baptiste", "Castellano", "Dunmore", "Ekwueme", "Fairbanks", "Galloway", "Halvorsen",
    "Iwasaki", "Jablonski", "Kowalczyk", "Lindqvist", "Moreau", "Nakamura", "Okonkwo", "Pemberton",
    "Quintero", "Rasmussen", "Sorensen", "Takahashi", "Underhill", "Valdez", "Whitfield", "Yilmaz",
    "Zamora", "Ashworth", "Brennan", "Calloway", "Delacroix", "Eastwood", "Fitzgerald", "Gutierrez",
    "Hargrove", "Ivanova", "Jorgensen", "Kapoor", "Lachance", "Mbeki", "Novak", "Oyelaran",
    "Petrov", "Ramirez", "Santoro", "Thornbury", "Ueda", "Vasquez", "Winslow", "Xu",
    "Yamamoto", "Zielinski", "Albright", "Blackwood", "Carrington", "Dimitriou", "Espinoza", "Farouk",
    "Greenberg", "Holloway", "Ingram", "Kettering",
];

/// Cities with their state codes and area codes.
pub(super) const CITIES: [(&str, &str, &str); 12] = [
    ("Harborview", "WA", "206"),
    ("Cedar Falls", "OR", "503"),
    ("Maple Ridge", "CA", "415"),
    ("Riverton", "CO", "303"),
    ("Lakeshore", "IL", "312"),
    ("Pinecrest", "TX", "512"),
    ("Brookfield", "MA", "617"),
    ("Silverton", "NY", "212"),
    ("Oakhaven", "GA", "404"),
    ("Willow Bay", "FL", "305"),
    ("Stonebridge", "MN", "612"),
    ("Fairmont", "AZ", "602"),
];

/// Street names (a number and a suffix are added).
pub(super) const STREETS: [&str; 16] = [
    "Juniper", "Alder", "Hawthorne", "Linden", "Sycamore", "Magnolia", "Birch", "Chestnut",
    "Laurel", "Aspen", "Elm", "Poplar", "Cypress", "Hickory", "Spruce", "Walnut",
];

/// Street suffixes.
pub(super) const STREET_SUFFIXES: [&str; 6] = ["Street", "Avenue", "Lane", "Road", "Court", "Way"];

/// Email domains of people.
pub(super) const EMAIL_DOMAINS: [&str; 5] = ["inboxly.com", "postmark.net", "mailhaven.org", "letterbox.io", "quickmail.com"];

/// Payment card products.
pub(super) const CARD_NAMES: [&str; 6] = [
    "Visa Everyday",
    "Mastercard Gold",
    "Amex Blue",
    "Discover Cashback",
    "Visa Travel Rewards",
    "Mastercard Student",
];

/// Music genres.
pub(super) const GENRES: [&str; 10] = [
    "pop", "rock", "jazz", "hip hop", "electronic", "classical", "country", "r&b", "folk", "indie",
];

/// Adjectives for song, album and band names.
pub(super) const ADJECTIVES: [&str; 40] = [
    "Electric", "Silent", "Golden", "Velvet", "Broken", "Midnight", "Crimson", "Hollow", "Wild", "Gentle",
    "Restless", "Neon", "Paper", "Silver", "Distant", "Burning", "Frozen", "Lucky", "Hidden", "Faded",
    "Bright", "Lonely", "Sacred", "Rusty", "Endless", "Quiet", "Savage", "Sweet", "Bitter", "Cosmic",
    "Northern", "Wandering", "Crystal", "Shallow", "Heavy", "Tender", "Sunlit", "Stormy", "Little", "Open",
];

/// Nouns for song, album and band names.
pub(super) const NOUNS: [&str; 40] = [
    "Harbor", "Engine", "River", "Garden", "Horizon", "Lantern", "Mirror", "Ocean", "Highway", "Canyon",
    "Echo", "Feather", "Thunder", "Window", "Shadow", "Compass", "Orchard", "Signal", "Ember", "Tide",
    "Meadow", "Skyline", "Valley", "Anchor", "Comet", "Desert", "Forest", "Island", "Letter", "Machine",
    "Morning", "Planet", "Rain", "Satellite", "Season", "Storm", "Summer", "Train", "Wave", "Winter",
];

/// Verbs for song titles.
pub(super) const VERBS: [&str; 16] = [
    "Chasing", "Holding", "Burning", "Dancing", "Leaving", "Calling", "Running", "Waiting",
    "Falling", "Dreaming", "Finding", "Losing", "Drawing", "Breaking", "Crossing", "Following",
];

/// Reasons people pay each other, with a typical amount range in dollars.
pub(super) const PAYMENT_REASONS: [(&str, i64, i64); 20] = [
    ("Pizza night", 8, 30),
    ("Rent share", 400, 900),
    ("Concert tickets", 40, 150),
    ("Groceries", 15, 90),
    ("Utilities", 30, 120),
    ("Dinner", 20, 80),
    ("Movie tickets", 10, 30),
    ("Birthday gift", 15, 60),
    ("Taxi ride", 8, 40),
    ("Coffee", 3, 12),
    ("Gas money", 15, 60),
    ("Brunch", 15, 45),
    ("Internet bill", 20, 50),
    ("Book club", 5, 20),
    ("Gym class", 10, 35),
    ("Camping gear", 25, 120),
    ("Board game night snacks", 5, 25),
    ("Weekend trip", 80, 300),
    ("Lunch", 8, 25),
    ("Flowers", 15, 40),
];

/// Shop categories with their nouns, brands and price range in dollars.
pub(super) const SHOP_CATEGORIES: [(&str, [&str; 6], [&str; 3], i64, i64); 10] = [
    ("kitchen", ["Skillet", "Blender", "Knife Set", "Kettle", "Cutting Board", "Mixing Bowls"], ["Hearthware", "Copperleaf", "Kitchwise"], 12, 180),
    ("books", ["Novel", "Cookbook", "Travel Guide", "Biography", "Poetry Collection", "Field Guide"], ["Lantern Press", "Inkwell Books", "Northpage"], 8, 45),
    ("electronics", ["Headphones", "Speaker", "Charger", "Keyboard", "Webcam", "Smartwatch"], ["Voltaic", "Sonara", "Pixelline"], 15, 400),
    ("clothing", ["Jacket", "Sweater", "Rain Boots", "Scarf", "Running Shoes", "Hoodie"], ["Threadline", "Northloom", "Urbanfolk"], 15, 160),
    ("sports", ["Yoga Mat", "Water Bottle", "Tennis Racket", "Dumbbells", "Bike Helmet", "Jump Rope"], ["Peakform", "Stridewell", "Apexa"], 8, 150),
    ("home", ["Lamp", "Throw Blanket", "Candle", "Picture Frame", "Wall Clock", "Storage Basket"], ["Nestory", "Dwellwood", "Hearthside"], 10, 120),
    ("beauty", ["Face Cream", "Shampoo", "Lip Balm", "Hair Dryer", "Sunscreen", "Perfume"], ["Luminae", "Purebloom", "Velour"], 5, 90),
    ("toys", ["Puzzle", "Building Blocks", "Plush Bear", "Board Game", "Kite", "Toy Train"], ["Playwright", "Tinkertown", "Jollybox"], 6, 70),
    ("garden", ["Watering Can", "Pruning Shears", "Planter", "Seed Kit", "Garden Gloves", "Hose"], ["Greenhaven", "Rootwise", "Bloomcraft"], 6, 80),
    ("office", ["Notebook", "Desk Organizer", "Fountain Pen", "Desk Lamp", "Planner", "Sticky Notes"], ["Deskbound", "Paperly", "Officina"], 3, 90),
];

/// Words that qualify product names.
pub(super) const PRODUCT_QUALIFIERS: [&str; 12] = [
    "Classic", "Pro", "Compact", "Deluxe", "Eco", "Essential", "Premium", "Travel", "Ultra", "Everyday", "Mini", "Signature",
];

/// Review texts by star rating, 1 to 5.
pub(super) const REVIEW_TEXTS: [[&str; 3]; 5] = [
    ["Broke after a week.", "Not as described.", "Would not buy again."],
    ["Disappointing quality.", "Works, barely.", "Expected more for the price."],
    ["It is fine.", "Does the job.", "Average, nothing special."],
    ["Good value.", "Happy with it.", "Works well, minor flaws."],
    ["Absolutely love it!", "Exceeded my expectations.", "Perfect, would buy again."],
];

/// Subjects of emails between people who know each other.
pub(super) const PERSONAL_SUBJECTS: [&str; 16] = [
    "Dinner on Friday?",
    "Photos from the weekend",
    "Quick question",
    "Happy birthday!",
    "Plans for the holidays",
    "Book recommendation",
    "Game night this week",
    "Checking in",
    "Recipe you asked for",
    "Trip itinerary",
    "Moving day help",
    "Concert next month",
    "Thank you!",
    "Catching up",
    "Hiking on Sunday",
    "Project update",
];

/// Newsletters and service emails: sender address, subject.
pub(super) const SERVICE_EMAILS: [(&str, &str); 10] = [
    ("noreply@coinpay.app", "Your monthly coinpay statement"),
    ("orders@shop.app", "Your order has shipped"),
    ("weekly@tunes.app", "New releases picked for you"),
    ("digest@citynews.example", "Your morning digest"),
    ("alerts@bankline.example", "Security alert: new sign-in"),
    ("hello@fitclub.example", "Your class schedule for next week"),
    ("team@travelhub.example", "Deals on weekend getaways"),
    ("info@library.example", "Your borrowed book is due soon"),
    ("support@files.app", "Storage tips for your files"),
    ("events@museum.example", "Members' night invitation"),
];

/// Text message lines.
pub(super) const TEXT_LINES: [&str; 24] = [
    "On my way!",
    "Running 10 minutes late, sorry",
    "Did you see the game last night?",
    "Can you pick up milk on the way home?",
    "Thanks again for yesterday",
    "What time works for you?",
    "Sounds good to me",
    "Call me when you're free",
    "Happy birthday!! 🎉",
    "Are we still on for tonight?",
    "I sent you the money",
    "Let's grab coffee this week",
    "Just landed",
    "Don't forget the keys",
    "Movie starts at 8",
    "Miss you, talk soon",
    "Can you send me that link?",
    "Good luck today!",
    "The package arrived",
    "See you at the gym",
    "Who's bringing dessert?",
    "Heading out now",
    "Love that photo",
    "Rent is due Friday",
];
