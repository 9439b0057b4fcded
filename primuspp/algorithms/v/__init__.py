"""The V family: zbv, v-half, v-min and v-auto on one slot grid."""
