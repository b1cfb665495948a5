//! The order tree: the agents forwarding the master's orders (launch, signal, slice tables)
//! down a tree instead of the master calling every node. Pure: the shape of the tree
//! ([`fanout`]) and what a forwarder holds of one order and how long a subtree may take
//! ([`route`]); the gRPC call that carries an order is `gang_proto::relay::forward`.

pub mod fanout;
pub mod hop_time;
pub mod liveness;
pub mod route;

pub use route::Route;
