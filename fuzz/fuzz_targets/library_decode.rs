//! Fuzzes the skill library decoder: arbitrary bytes given to
//! `HashSkillLibrary::from_postcard` must yield a library or an error, never a panic,
//! and a library that decodes must encode and decode back to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sage_core::skill::HashSkillLibrary;

fuzz_target!(|data: &[u8]| {
    if let Ok(library) = HashSkillLibrary::from_postcard(data) {
        let again = HashSkillLibrary::from_postcard(&library.to_postcard())
            .expect("a decoded library re-encodes to valid bytes");
        assert_eq!(library, again);
    }
});
