pub mod access;
pub mod inbox;
pub mod not_found;
