// Prelude of every kernel file: workgroups of 256 invocations on a 2-D grid. The host
// folds a long 1-D range of workgroups into rows of at most the adapter's
// max_compute_workgroups_per_dimension; kernels flatten it back and bound-check.

const WORKGROUP: u32 = 256u;

// Index of this workgroup in the flattened grid.
fn workgroup_index(wid: vec3<u32>, groups: vec3<u32>) -> u32 {
    return wid.y * groups.x + wid.x;
}

// Index of this invocation in the flattened grid of 256-wide workgroups.
fn invocation_index(wid: vec3<u32>, groups: vec3<u32>, lid: u32) -> u32 {
    return workgroup_index(wid, groups) * WORKGROUP + lid;
}
