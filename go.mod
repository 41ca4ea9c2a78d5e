module bitgo

go 1.26
